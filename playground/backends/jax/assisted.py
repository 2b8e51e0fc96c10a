"""Assisted (speculative) decoding on the JAX path: drafts verified several at a time by one jitted forward.

Decoding a token at a time reads every weight once per token; a verify pass reads them once for the last
token and all its drafts. Each pass: the host drafts (prompt lookup over the text so far), the device runs
the main model over the last token and the drafts, keeps what plain decoding would have produced
(speculative.py) and rolls the cache back past the rest (verify.py), and the kept tokens come back to the
host, one sync per pass, streamed as they arrive. Greedy output is token for token plain greedy's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import jax
import numpy as np
import torch

from playground.backends.base import EmitTokens, GenerationOutput, ShouldStop, TokenInfo, eos_ids
from playground.backends.jax import sampling
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.extend import assisted_plan
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.caches.pytree import cache_bytes
from playground.backends.jax.draft import FIRST_DRAFTS, MAX_DRAFTS, Drafter, next_draft_count
from playground.backends.jax.engine import DecodeState, Engine, engine_for
from playground.backends.jax.lookup import lookup
from playground.backends.jax.programs import Compiled, run_prompt
from playground.backends.jax.records import token_records
from playground.backends.jax.sampling import Knobs
from playground.backends.jax.verify import verify_program
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


def draft_widths(drafts: int) -> tuple[int, ...]:
    """Verify widths compiled for up to `drafts` drafts: the last token plus that many."""
    return (drafts + 1,)


def assisted_mode(spec: RunSpec, vocab_size: int) -> sampling.SamplingMode:
    """Greedy, or the sampling knobs' mode when the run samples (speculative sampling)."""
    strategy = "sampling" if spec.assisted_sampling else "greedy"
    return sampling.mode_for(spec.replace(strategy=strategy, assistant=None, prompt_lookup=0, assisted_sampling=False),
                             vocab_size)


class _Programs(Compiled):
    """prefill and first token as plain decoding's, a verify pass per cache layout and width, and the growth
    steps between layouts."""

    def __init__(self, engine: Engine, bucket: int, schedule: list[Layouts], widths: tuple[int, ...],
                 mode: sampling.SamplingMode, eos: tuple[int, ...], with_q: bool) -> None:
        super().__init__()
        self.prefill = self._add(engine.prefill_program(bucket, schedule[0]))
        self.first = self._add(engine.start_program(bucket, schedule[0], mode, eos))
        self.verifiers = {(layouts, width): self._add(verify_program(engine, layouts, width, mode, eos, with_q))
                          for layouts in schedule for width in widths}
        self.growers = {new: self._add(engine.grow_program(old, new, mode))
                        for old, new in zip(schedule, schedule[1:], strict=False)}


@dataclass
class _Request:
    engine: Engine
    reused: bool
    prompt: np.ndarray  # (T,) the prompt's ids, for the lookup
    bucket: int
    plan: CachePlan
    eos: tuple[int, ...]
    widths: tuple[int, ...]
    programs: _Programs
    drafter: Drafter | None  # the draft model's side, or None for prompt lookup


@dataclass
class _Run:
    """The decoding so far: device state, what reached the host, and the draft counts."""

    state: DecodeState[jax.Array]
    knobs: Knobs[jax.Array]
    length: int
    layouts: Layouts
    tokens: list[int]
    token_info: list[TokenInfo]
    token_times: list[float]
    kv_trace: list[int]
    draft_flags: list[bool]
    passes: int = 0  # verify passes
    drafted: int = 0
    accepted: int = 0
    lookup_s: float = 0.0  # host time spent drafting
    stopped: bool = False
    counts: dict[int, jax.Array] = field(default_factory=dict)  # each draft count on the device, put once
    next_drafts: int = min(FIRST_DRAFTS, MAX_DRAFTS)  # a draft model's next proposal size


def generate(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens, should_stop: ShouldStop,
             draft: LoadedModel | None = None) -> GenerationOutput:
    """Prefill, then verify passes until EOS, max_new_tokens or should_stop(), streaming each pass's tokens."""
    start = time.perf_counter()
    prompt = input_ids.detach().cpu().numpy().astype(np.int32)  # (1, T)
    request = _prepare(loaded, prompt, spec, draft)
    run = _prefill(request, prompt, spec)
    if request.drafter is not None:
        request.drafter.start(prompt, request.bucket, spec, run.state)
    emit(run.tokens[:])
    done = run.tokens[-1] in request.eos
    while not done and len(run.tokens) < spec.max_new_tokens:
        if should_stop():
            run.stopped = True
            break
        chunk = _verify_pass(request, run, spec)
        emit(chunk)
        done = chunk[-1] in request.eos
    return _output(request, run, start)


def _prepare(loaded: LoadedModel, prompt: np.ndarray, spec: RunSpec, draft: LoadedModel | None) -> _Request:
    """Engines, cache plans and every program of the request (the draft's too), compiled now if new."""
    engine, reused = engine_for(loaded.model, spec.devices)
    batch, prompt_len = prompt.shape
    widths = draft_widths(spec.prompt_lookup) if draft is None else (MAX_DRAFTS + 1,)
    plan = assisted_plan(spec, engine.config, prompt_len, max(widths))
    bucket = cache_plan.prefill_bucket(prompt_len)
    mode = assisted_mode(spec, engine.vocab_size)
    eos = tuple(sorted(eos_ids(loaded.model.generation_config, loaded.tokenizer)))
    drafter = None if draft is None else Drafter(draft, engine.vocab_size, spec, prompt_len, bucket, mode)
    with_q = drafter is not None and not mode.greedy
    programs = _Programs(engine, bucket, plan.schedule(), widths, mode, eos, with_q)
    if drafter is not None:
        programs.compile_s += drafter.programs.compile_s
    return _Request(engine, reused, prompt[0], bucket, plan, eos, widths, programs, drafter)


def _prefill(request: _Request, prompt: np.ndarray, spec: RunSpec) -> _Run:
    state, knobs, first, info = run_prompt(request.engine, request.programs, prompt, request.bucket, spec)
    length = request.plan.lengths[0]
    return _Run(state=state, knobs=knobs, length=length, layouts=request.plan.at(length), tokens=[first],
                token_info=token_records(info, 1), token_times=[time.perf_counter()],
                kv_trace=[cache_bytes(state.cache)], draft_flags=[False])


def _drafts(request: _Request, run: _Run, spec: RunSpec) -> tuple[jax.Array, int, jax.Array | None]:
    """The next pass's drafts (1, width - 1) on the device, how many are real, and the draft model's
    distributions when it samples; never more than the tokens still wanted after the main model's own."""
    room = spec.max_new_tokens - len(run.tokens) - 1
    if request.drafter is not None:
        count = min(run.next_drafts, room)
        tokens, probs = request.drafter.drafts(count)
        # the draft runs on one device: its arrays laid out as the main model's (replicated over its mesh)
        return request.engine.put(tokens), count, None if probs is None else request.engine.put(probs)
    began = time.perf_counter()
    history = np.concatenate([request.prompt, np.asarray(run.tokens, np.int32)])
    found = lookup(history, min(spec.prompt_lookup, room))
    run.lookup_s += time.perf_counter() - began
    width = min(w for w in request.widths if w > len(found))
    padded = np.zeros((1, width - 1), np.int32)
    padded[0, : len(found)] = found
    return request.engine.put(padded), len(found), None


def _verify_pass(request: _Request, run: _Run, spec: RunSpec) -> list[int]:
    """One verify pass over the next drafts, recorded in `run`; returns its kept tokens."""
    drafts, drafted, probs = _drafts(request, run, spec)
    width = drafts.shape[1] + 1
    _grow_to_fit(request, run, width)
    if drafted not in run.counts:
        run.counts[drafted] = request.engine.put(np.int32(drafted))
    verify = request.programs.verifiers[run.layouts, width]
    run.state, verdict = verify(request.engine.weights, run.state, drafts, run.counts[drafted], probs, run.knobs)
    if request.drafter is not None:
        request.drafter.follow(run.state)
    verdict = jax.device_get(verdict)  # the one host sync of this pass
    now = time.perf_counter()
    count, accepted = int(verdict.kept_count), int(verdict.accepted)
    chunk = [int(t) for t in verdict.tokens[:count]]
    run.next_drafts = next_draft_count(drafted, accepted) if drafted else run.next_drafts
    run.passes += 1
    run.drafted += drafted
    run.accepted += accepted
    run.tokens += chunk
    run.token_info += token_records(verdict.info, count)
    run.draft_flags += [i < accepted for i in range(count)]
    run.token_times += [now] * count
    run.kv_trace += [cache_bytes(run.state.cache)] * count
    return chunk


def _grow_to_fit(request: _Request, run: _Run, width: int) -> None:
    """Move to the first planned length that holds a pass of `width` tokens after the tokens so far, copying
    the cache through every layout on the way."""
    needed = len(request.prompt) + len(run.tokens) - 1 + width
    for length in request.plan.lengths:
        if length <= run.length:
            continue
        if needed <= run.length:
            return
        layouts = request.plan.at(length)
        if layouts != run.layouts:
            run.state, run.layouts = request.programs.growers[layouts](run.state), layouts
        run.length = length


def _output(request: _Request, run: _Run, start: float) -> GenerationOutput:
    """The backends' common output with the draft counts, and this path's figures in `extra`."""
    lengths = list(request.plan.lengths)
    engine = request.engine
    return GenerationOutput(
        acceptance_rate=run.accepted / run.drafted if run.drafted else None,
        forward_passes=1 + run.passes,  # the prefill gave the first token, each verify pass the rest
        draft_flags=run.draft_flags,
        sequences=[run.tokens], token_info=run.token_info, token_times=run.token_times, start_time=start,
        compile_s=request.programs.compile_s, stopped=run.stopped,
        kv_cache_bytes=cache_bytes(run.state.cache), kv_trace=run.kv_trace,
        extra={"prefill_bucket": request.bucket, "cache_length": run.length,
               "cache_lengths": lengths[: lengths.index(run.length) + 1],
               "verify_widths": list(request.widths), "verify_passes": run.passes,
               "draft_tokens_proposed": run.drafted, "draft_tokens_accepted": run.accepted,
               "draft_lookup_s": round(run.lookup_s, 4),
               "draft_kv_cache_bytes": request.drafter.cache_bytes() if request.drafter else None,
               "weights_moved_s": 0.0 if request.reused else round(engine.move_s, 3),
               "device_weight_bytes": engine.weight_bytes, "compiled_programs": len(engine.compiled),
               **engine.sharding_info},
    )

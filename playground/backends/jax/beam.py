"""JAX path, strategy beam: transformers' beam search over the jitted decoder, K hypotheses as one batch.

The prompt is prefilled once (batch 1); each decode call then runs up to STEPS_PER_CALL beam steps in a
lax.while_loop (beam_programs.py), the cache reordered by the chosen parents inside jit, and returns the steps'
candidates for the beam tree as fixed-shape rows: one host sync per chunk. As on the PyTorch path, nothing
streams while the search runs (no hypothesis is final until it ends); the best sequence is emitted whole.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
import torch

from playground.backends.base import EmitTokens, GenerationOutput, ShouldStop, eos_ids
from playground.backends.beam_nodes import BeamTree
from playground.backends.jax import beam_programs
from playground.backends.jax.beam_programs import BeamState
from playground.backends.jax.beam_search import BeamKnobs, BeamMode, StepRecord, beam_mode
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.caches.pytree import cache_bytes
from playground.backends.jax.engine import Engine, engine_for
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec

STEPS_PER_CALL = 8  # beam steps per decode call (as the greedy decoder's chunk)


def generate(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
             should_stop: ShouldStop) -> GenerationOutput:
    """Beam search for `spec` (already validated); emits the best sequence once the search ends."""
    start = time.perf_counter()
    prompt = input_ids.detach().cpu().numpy().astype(np.int32)  # (1, T)
    request = _prepare(loaded, prompt, spec)
    run = _begin(request, prompt, spec)
    _search(request, run, spec, should_stop)
    sequences, scores = _returned(run, spec.num_return_sequences)
    emit(sequences[0])
    return _output(request, run, start, sequences, scores)


@dataclass
class _Programs:
    """Every program the request runs, fetched (or compiled) before the prompt: compile_s is counted apart."""

    prefill: Any
    start: Any
    decoders: dict[Layouts, Any]  # per layouts the cache steps through
    growers: dict[Layouts, Any]  # into each layouts but the first
    compile_s: float


def _programs(engine: Engine, bucket: int, schedule: list[Layouts], mode: BeamMode, decode: bool) -> _Programs:
    fetched = {"prefill": engine.prefill_program(bucket, schedule[0], 1),
               "start": beam_programs.start_program(engine, bucket, schedule[0], mode)}
    decoders = {layouts: beam_programs.decode_program(engine, layouts, STEPS_PER_CALL, mode)
                for layouts in (schedule if decode else [])}
    growers = {new: beam_programs.grow_program(engine, old, new, mode)
               for old, new in zip(schedule, schedule[1:] if decode else [], strict=False)}
    seconds = sum(s for _, s in [*fetched.values(), *decoders.values(), *growers.values()])
    return _Programs(fetched["prefill"][0], fetched["start"][0], {k: p for k, (p, _) in decoders.items()},
                     {k: p for k, (p, _) in growers.items()}, seconds)


@dataclass
class _Request:
    engine: Engine
    reused: bool  # the engine (its device weights) existed already
    prompt_len: int
    bucket: int
    plan: CachePlan
    mode: BeamMode
    programs: _Programs


@dataclass
class _Run:
    """The search so far: its device state, and what reached the host."""

    state: BeamState
    knobs: BeamKnobs[jax.Array]
    length: int  # the cache's length now
    layouts: Layouts
    tree: BeamTree
    produced: int = 0  # beam steps done
    done: bool = False
    calls: int = 0
    stopped: bool = False
    kv_trace: list[int] = field(default_factory=list)  # cache bytes after each step
    limits: dict[int, jax.Array] = field(default_factory=dict)  # each chunk size on the device, put once


def _prepare(loaded: LoadedModel, prompt: np.ndarray, spec: RunSpec) -> _Request:
    engine, reused = engine_for(loaded.model, spec.devices)
    prompt_len = prompt.shape[1]
    bucket = cache_plan.prefill_bucket(prompt_len)
    plan = cache_plan.plan_cache(spec, engine.config, prompt_len, STEPS_PER_CALL)
    # transformers' beam search stops at the generation config's EOS ids (sorted: a compile key)
    eos = tuple(sorted(eos_ids(loaded.model.generation_config, loaded.tokenizer)))
    mode = beam_mode(spec.num_beams, spec.max_new_tokens, eos, spec.repetition_penalty != 1.0)
    programs = _programs(engine, bucket, plan.schedule(), mode, decode=spec.max_new_tokens > 1)
    return _Request(engine, reused, prompt_len, bucket, plan, mode, programs)


def _knobs(engine: Engine, spec: RunSpec, last: int) -> BeamKnobs[jax.Array]:
    return engine.put(BeamKnobs(np.float32(spec.length_penalty), np.bool_(spec.early_stopping),
                                np.int32(spec.min_new_tokens), np.float32(spec.repetition_penalty), np.int32(last)))


def _begin(request: _Request, prompt: np.ndarray, spec: RunSpec) -> _Run:
    """Prefill the prompt, and the first beam step from its logits."""
    engine, programs = request.engine, request.programs
    padded = np.zeros((1, request.bucket), np.int32)  # right padding: causal masking keeps it out
    padded[:, : request.prompt_len] = prompt
    ids, true_len = engine.put(padded), engine.put(np.int32(request.prompt_len))
    knobs = _knobs(engine, spec, spec.max_new_tokens)
    logits, cache = programs.prefill(engine.weights, ids, true_len)
    state, record = programs.start(logits, ids, true_len, knobs, cache)
    length = request.plan.lengths[0]
    run = _Run(state=state, knobs=knobs, length=length, layouts=request.plan.at(length), tree=BeamTree())
    _record(run, jax.device_get(record), 1, bool(jax.device_get(state.hyps.done)))
    return run


def _record(run: _Run, records: StepRecord, count: int, done: bool) -> None:
    """`count` steps' candidates into the tree (records with a leading step axis, or one step's)."""
    rows = [np.atleast_2d(np.asarray(r)) for r in records]
    for parents, tokens, scores, finished, kept in zip(*(r[:count] for r in rows), strict=True):
        run.tree.add_step(scores.tolist(), tokens.tolist(), parents.tolist())
        run.tree.select(finished.tolist(), kept.tolist())
    run.produced += count
    run.done = done
    run.kv_trace += [cache_bytes(run.state.cache)] * count


def _search(request: _Request, run: _Run, spec: RunSpec, should_stop: ShouldStop) -> None:
    """Decode calls until the search ends. A stop ends it as transformers does: the next step's candidates all
    count as stopped, so the best of them finish."""
    while not run.done and run.produced < spec.max_new_tokens:
        limit = min(STEPS_PER_CALL, spec.max_new_tokens - run.produced)
        if should_stop():
            run.stopped, limit = True, 1
            run.knobs = _knobs(request.engine, spec, run.produced + 1)
        _chunk(request, run, limit)


def _chunk(request: _Request, run: _Run, limit: int) -> None:
    """One decode call of up to `limit` steps, its records into the tree."""
    _grow_to_fit(request, run, limit)
    if limit not in run.limits:
        run.limits[limit] = request.engine.put(np.int32(limit))
    decode = request.programs.decoders[run.layouts]
    run.state, records, count = decode(request.engine.weights, run.state, run.limits[limit], run.knobs)
    records, count, done = jax.device_get((records, count, run.state.hyps.done))  # the chunk's one host sync
    run.calls += 1
    _record(run, records, int(count), bool(done))


def _grow_to_fit(request: _Request, run: _Run, limit: int) -> None:
    """Step through the plan's lengths until the next `limit` steps' keys fit (the beams share one position)."""
    lengths = request.plan.lengths
    while request.prompt_len + run.produced - 1 + limit > run.length and run.length < lengths[-1]:
        run.length = lengths[lengths.index(run.length) + 1]
        layouts = request.plan.at(run.length)
        if layouts != run.layouts:
            run.state = request.programs.growers[layouts](run.state)
            run.layouts = layouts


def _returned(run: _Run, count: int) -> tuple[list[list[int]], list[float]]:
    """The best `count` finished hypotheses (new tokens, through their EOS) and their scores."""
    hyps = jax.device_get(run.state.hyps)
    sequences = [hyps.finished[i, : hyps.finished_lengths[i]].tolist() for i in range(count)]
    return sequences, [float(s) for s in hyps.finished_scores[:count]]


def _output(request: _Request, run: _Run, start: float, sequences: list[list[int]],
            scores: list[float]) -> GenerationOutput:
    engine, lengths = request.engine, list(request.plan.lengths)
    return GenerationOutput(
        sequences=sequences,
        start_time=start,
        token_times=[],  # nothing streams during a beam search (as on the PyTorch path)
        kv_cache_bytes=cache_bytes(run.state.cache),
        compile_s=request.programs.compile_s,
        scores=scores,
        forward_passes=run.produced,  # the prefill and one batched forward per later step
        stopped=run.stopped,
        kv_trace=run.kv_trace,
        beam_tree=run.tree.tree(sequences[0]),
        extra={"prefill_bucket": request.bucket, "cache_length": run.length,
               "cache_lengths": lengths[: lengths.index(run.length) + 1],
               "cache_layers": cache_plan.describe(run.layouts), "beam_candidates": request.mode.candidates,
               "steps_per_call": STEPS_PER_CALL, "decode_calls": run.calls,
               "weights_moved_s": 0.0 if request.reused else round(engine.move_s, 3),
               "device_weight_bytes": engine.weight_bytes, "compiled_programs": len(engine.compiled),
               **engine.sharding_info},
    )

"""JAX path: a torchax-traced HF model, jitted prefill and a multi-step decode loop over a fixed-shape cache.

generate() is the backend entry the runner calls. The prompt is padded on the right to a power-of-two
bucket (causal attention keeps padding out of the real positions, and decoding starts at the true length,
overwriting it), so a new prompt length rarely compiles. Each decode call runs up to STEPS_PER_CALL steps
in a lax.while_loop that stops at EOS, then hands that chunk of tokens to the host: one host sync per
chunk, not per token. The cache's layout per layer (caches/plan.py) is decided once per request; a growing
cache steps through its lengths by doubling (one copy each time) and each layout compiles its decode program
once, so a ring buffer that has reached its window never grows or recompiles again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
import torch

from playground.backends.base import EmitTokens, GenerationOutput, ReportProgress, ShouldStop, TokenInfo, eos_ids
from playground.backends.jax import beam, sampling
from playground.backends.jax.architectures import check_architecture
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.caches.pytree import cache_bytes
from playground.backends.jax.engine import DecodeState, Engine, compile_notices, engine_for
from playground.backends.jax.programs import Compiled, run_prompt
from playground.backends.jax.records import token_records as _records
from playground.backends.jax.sampling import Knobs
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec

STEPS_PER_CALL = 8  # tokens per decode call: the streaming chunk, and the Python overhead divisor


class JaxBackend:
    """The torchax-traced model under jax.jit: prefill and chunked decode over a static cache."""

    name = "jax"

    def generate(self, loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
                 should_stop: ShouldStop, draft: LoadedModel | None = None,
                 progress: ReportProgress | None = None) -> GenerationOutput:
        check_architecture(loaded.model.config)
        with compile_notices(_announce_once(progress)):
            if spec.strategy == "assisted":
                from playground.backends.jax import assisted

                return assisted.generate(loaded, input_ids, spec, emit, should_stop, draft)
            return generate(loaded, input_ids, spec, emit, should_stop)


COMPILING = "compiling for this prompt length, first time only; cached afterwards"


def _announce_once(progress: ReportProgress | None) -> Callable[[], None]:
    """Say so when the request's first program starts compiling; a cached request says nothing."""
    said = False

    def announce() -> None:
        nonlocal said
        if progress is not None and not said:
            said = True
            progress(0.0, COMPILING)
    return announce


def generate(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
             should_stop: ShouldStop) -> GenerationOutput:
    """Prefill, then decode in chunks, streaming each chunk through `emit` as it reaches the host.

    `spec` is already validated: RunSpec refuses what this path cannot run (compatibility.py).
    """
    if spec.strategy == "beam":
        return beam.generate(loaded, input_ids, spec, emit, should_stop)
    start = time.perf_counter()
    prompt = input_ids.detach().cpu().numpy().astype(np.int32)  # (1, T)
    request = _prepare(loaded, prompt, spec)
    run = _prefill(request, prompt, spec)
    emit(run.tokens[:])
    _decode_chunks(request, run, spec, emit, should_stop)
    return _output(request, run, start)


class _Programs(Compiled):
    """Every compiled program a request needs: prefill, first token, a decode loop and a growth step per layout."""

    def __init__(self, engine: Engine, bucket: int, schedule: list[Layouts], mode: sampling.SamplingMode,
                 eos: tuple[int, ...], batch: int, decode: bool) -> None:
        super().__init__()
        self.prefill = self._add(engine.prefill_program(bucket, schedule[0], batch))
        self.first = self._add(engine.start_program(bucket, schedule[0], mode, eos, batch))
        self.decoders: dict[Layouts, Any] = {}
        self.growers: dict[Layouts, Any] = {}
        for i, layouts in enumerate(schedule if decode else []):
            self.decoders[layouts] = self._add(engine.decode_program(layouts, STEPS_PER_CALL, mode, eos, batch))
            if i:
                self.growers[layouts] = self._add(engine.grow_program(schedule[i - 1], layouts, mode, batch))


@dataclass
class _Request:
    """What a request fixes before it runs: its engine, prompt layout, cache plan, stop tokens and programs."""

    engine: Engine
    reused: bool  # the engine (its device weights) existed already
    prompt_len: int
    bucket: int  # the padded prompt length
    plan: CachePlan  # each layer's layout, and the cache lengths decoding may step through
    eos: tuple[int, ...]
    programs: _Programs


@dataclass
class _Run:
    """A request's decoding so far: the device state the next call continues from, and what reached the host."""

    state: DecodeState[jax.Array]
    knobs: Knobs[jax.Array]  # on the device
    length: int  # the cache's length now
    layouts: Layouts  # the cache's layouts at that length
    tokens: list[int]
    token_info: list[TokenInfo]
    token_times: list[float]  # when each token reached the host
    kv_trace: list[int]  # cache bytes after each token
    limits: dict[int, jax.Array] = field(default_factory=dict)  # each chunk size on the device, put once
    calls: int = 0  # decode calls
    stopped: bool = False  # ended by should_stop()


def _prepare(loaded: LoadedModel, prompt: np.ndarray, spec: RunSpec) -> _Request:
    """The model's engine, the cache plan and every program this request runs, compiled now if they are new."""
    engine, reused = engine_for(loaded.model, spec.devices)
    batch, prompt_len = prompt.shape
    bucket = cache_plan.prefill_bucket(prompt_len)
    plan = cache_plan.plan_cache(spec, engine.config, prompt_len, STEPS_PER_CALL)
    mode = sampling.mode_for(spec, engine.vocab_size)
    eos = tuple(sorted(eos_ids(loaded.model.generation_config, loaded.tokenizer)))  # sorted: a compile key
    programs = _Programs(engine, bucket, plan.schedule(), mode, eos, batch, decode=spec.max_new_tokens > 1)
    return _Request(engine, reused, prompt_len, bucket, plan, eos, programs)


def _prefill(request: _Request, prompt: np.ndarray, spec: RunSpec) -> _Run:
    """The padded prompt into a new cache, and the first new token brought to the host."""
    state, knobs, first, info = run_prompt(request.engine, request.programs, prompt, request.bucket, spec)
    length = request.plan.lengths[0]
    return _Run(state=state, knobs=knobs, length=length, layouts=request.plan.at(length), tokens=[first],
                token_info=_records(info, 1), token_times=[time.perf_counter()],
                kv_trace=[cache_bytes(state.cache)])


def _decode_chunks(request: _Request, run: _Run, spec: RunSpec, emit: EmitTokens, should_stop: ShouldStop) -> None:
    """Decode calls until EOS, max_new_tokens or should_stop(), streaming each call's chunk through `emit`."""
    done = run.tokens[-1] in request.eos
    while request.programs.decoders and not done and len(run.tokens) < spec.max_new_tokens:
        if should_stop():
            run.stopped = True
            return
        chunk = _decode_chunk(request, run, min(STEPS_PER_CALL, spec.max_new_tokens - len(run.tokens)))
        emit(chunk)
        done = not chunk or chunk[-1] in request.eos


def _decode_chunk(request: _Request, run: _Run, limit: int) -> list[int]:
    """One decode call of up to `limit` tokens (fewer at EOS), recorded in `run`; returns its tokens."""
    _grow_to_fit(request, run, limit)
    if limit not in run.limits:
        run.limits[limit] = request.engine.put(np.int32(limit))
    decode = request.programs.decoders[run.layouts]
    run.state, out, count = decode(request.engine.weights, run.state, run.limits[limit], run.knobs)
    out, count = jax.device_get((out, count))  # the one host sync of this chunk
    now = time.perf_counter()
    chunk = [int(t) for t in out.tokens[: int(count)]]
    run.token_info += _records(out.info, len(chunk))
    run.calls += 1
    run.tokens += chunk
    run.token_times += [now] * len(chunk)
    run.kv_trace += [cache_bytes(run.state.cache)] * len(chunk)
    return chunk


def _grow_to_fit(request: _Request, run: _Run, limit: int) -> None:
    """Step through the plan's lengths until the next `limit` tokens fit; layers whose layout changes are
    copied into their larger arrays (bounded ones stop changing once they hold their window)."""
    lengths = request.plan.lengths
    while request.prompt_len + len(run.tokens) - 1 + limit > run.length and run.length < lengths[-1]:
        run.length = lengths[lengths.index(run.length) + 1]
        layouts = request.plan.at(run.length)
        if layouts != run.layouts:
            run.state = request.programs.growers[layouts](run.state)
            run.layouts = layouts


def _output(request: _Request, run: _Run, start: float) -> GenerationOutput:
    """The backends' common output, with this path's figures (buckets, cache lengths, calls) in `extra`."""
    lengths = list(request.plan.lengths)
    return GenerationOutput(
        sequences=[run.tokens],
        start_time=start,
        token_times=run.token_times,
        kv_cache_bytes=cache_bytes(run.state.cache),
        compile_s=request.programs.compile_s,
        forward_passes=len(run.tokens),  # the prefill gave the first token, one decode step each of the rest
        stopped=run.stopped,
        kv_trace=run.kv_trace,
        token_info=run.token_info,
        extra={"prefill_bucket": request.bucket, "cache_length": run.length,
               "cache_lengths": lengths[: lengths.index(run.length) + 1],
               "cache_layers": cache_plan.describe(run.layouts),
               **_engine_extra(request.engine, request.reused, run.calls)},
    )


def _engine_extra(engine: Engine, reused: bool, calls: int) -> dict[str, Any]:
    return {
        "steps_per_call": STEPS_PER_CALL,
        "decode_calls": calls,
        "weights_moved_s": 0.0 if reused else round(engine.move_s, 3),
        "device_weight_bytes": engine.weight_bytes,
        "compiled_programs": len(engine.compiled),
        **engine.sharding_info,
    }

"""The one JAX request loop: prepare, prefill, grow the cache to fit, run chunked device calls, stream, stop.

The prompt is padded on the right to a power-of-two bucket (causal attention keeps padding out of the real
positions, and decoding starts at the true length, overwriting it), so a new prompt length rarely compiles.
Each device call runs up to STEPS_PER_CALL steps (or one verify pass) and hands its results to the host: one
host sync per call, not per token. The cache's layout per layer (caches/plan.py) is decided once per request;
a growing cache steps through its lengths by doubling (one copy each time) and each layout compiles its
programs once, so a ring buffer that has reached its window never grows or recompiles again. What differs
between strategies is a plug-in (strategy.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from playground.backends.base import EmitTokens, GenerationOutput, PreviewTokens, ShouldStop, eos_ids
from playground.backends.jax import prefix_reuse, reuse_vs_cold
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import Layouts
from playground.backends.jax.caches.pytree import cache_bytes
from playground.backends.jax.chain.chain import Context
from playground.backends.jax.engine import compiling
from playground.backends.jax.engine.engine import Engine, engine_for
from playground.backends.jax.programs import Programs, start_prompt
from playground.backends.jax.strategy import (
    STEPS_PER_CALL,
    Advance,
    OwnPrefill,
    OwnStep,
    ReplaysDraws,
    Request,
    Run,
    Strategy,
)
from playground.backends.prefix_store import Match, ReusePlan
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec

__all__ = ["STEPS_PER_CALL", "cache_extra", "engine_extra", "generate"]


def generate(loaded: LoadedModel, prompt_ids: Sequence[int], spec: RunSpec, emit: EmitTokens,
             should_stop: ShouldStop, strategy: Strategy, preview: PreviewTokens | None = None,
             draft: LoadedModel | None = None, reuse: ReusePlan | None = None) -> GenerationOutput:
    """Prefill, then device calls until EOS, max_new_tokens or should_stop(), streaming each call's tokens.
    `reuse`: prefill only what a kept cache does not hold (prefix_reuse.py), and hand this run's back.

    `spec` is already validated: RunSpec refuses what this path cannot run (compatibility.py).
    """
    # moving the weights to the devices (a model's first JAX request) is loading, as in the runner's load_s: it
    # is reported as extra.weights_moved_s, and neither TTFT nor total_s counts it
    engine, reused = engine_for(loaded.model, spec.devices, spec.weights)
    drafts = [engine_for(draft.model, 1, spec.weights)[0]] if draft is not None else []  # the Drafter's engine
    start = time.perf_counter()
    prompt = np.asarray([prompt_ids], np.int32)  # (1, T)
    warm, reuse_note = prefix_reuse.usable(reuse.warm if reuse else None)
    with compiling.request_compiles():
        request = _prepare(engine, reused, loaded, prompt, spec, strategy, reuse, warm)
        if not request.programs.wait(should_stop, start):
            return _stopped_compiling(request, start)
    request.preview = preview
    run, first = _prefill(request, strategy, spec.seed)
    if strategy.streams:
        emit(first.tokens)
    _decode(request, run, strategy, spec, emit, should_stop)
    out = _output(request, run, strategy, start)
    if engine.precision != "fp32":  # the run read the engine's own copy, not the torch model's
        out.weight_bytes = sum(e.weight_bytes for e in [engine, *drafts])
    if not strategy.streams:
        emit(out.sequences[0])  # nothing is final before a search ends: the best sequence, whole
    out.reused_tokens = request.warm.shared if request.warm is not None else 0
    out.reuse_note = reuse_note
    if reuse is not None and reuse.keep:
        # a search's rows share only the prompt's positions: what row 0 holds past it need not be the best sequence
        rows = jax.tree.leaves(run.state.cache.jax_layers[0].arrays)[0].shape[0]
        held = list(prompt_ids) + (list(out.sequences[0]) if rows == 1 else [])
        out.kept = prefix_reuse.snapshot(run.state.cache, held, whole=bool(spec.sized_new_tokens))
    if warm is not None:  # measured after the run, outside its timings
        out.vs_cold = reuse_vs_cold.vs_cold(loaded, spec, warm, list(prompt_ids), out.sequences[0])
    return out


def _prepare(engine: Engine, reused: bool, loaded: LoadedModel, prompt: np.ndarray, spec: RunSpec,
             strategy: Strategy, reuse: ReusePlan | None = None, warm: Match | None = None) -> Request:
    """The cache plan and every program this request runs on the model's engine, asked for (those not kept in
    memory start compiling). A step of a branch tree (`sized_new_tokens`) is sized for the whole tree and asks for
    the decode programs even when it takes one token, and where it keeps its cache, for the resume program the
    next step continues it with, so that no later step of the tree compiles anything. `warm`: the match the
    prompt continues, where `reuse`'s can be (prefix_reuse.usable)."""
    prompt_len = prompt.shape[1]
    bucket = cache_plan.request_bucket(spec, prompt_len)
    eos = tuple(sorted(eos_ids(loaded.model.generation_config, loaded.tokenizer)))  # sorted: a compile key
    plan, own = strategy.bind(engine, prompt_len, bucket, Context(engine.vocab_size, eos, loaded.tokenizer))
    programs = _programs(engine, bucket, plan.schedule(), strategy, decode=cache_plan.new_tokens(spec) > 1,
                         warm=warm, prompt_len=prompt_len)
    programs.asked += own
    if spec.sized_new_tokens and reuse is not None and reuse.keep:
        programs.asked.append(prefix_reuse.next_step_program(engine, plan.schedule()[0]))
    return Request(engine, reused, prompt, bucket, eos, plan, programs, warm=warm)


def _programs(engine: Engine, bucket: int, schedule: list[Layouts], strategy: Strategy, decode: bool,
              warm: Match | None = None, prompt_len: int = 0) -> Programs:
    """The step programs of every layouts the cache may step through, then prefill (the plug-in's own, if it reads
    more of the prompt than its last logits) and start, then the growth steps between layouts (no steps when the
    prompt's own token is the only one wanted, unless the first token is a step's). The step programs are asked
    for first: they are the largest, and the first asked is the first to compile (compiling.py). A `warm` run's
    prefill is the resume program over the prompt's suffix past the kept prefix."""
    programs, kernel = Programs(), strategy.kernel
    stepped = schedule if decode else schedule[:1] if strategy.first_token_steps else []
    for layouts in stepped:
        if isinstance(strategy, OwnStep):
            for key, pending in strategy.step_programs(engine, layouts).items():
                programs.steps[key] = programs.add(pending)
        else:
            programs.steps[layouts] = programs.add(kernel.step_program(layouts, STEPS_PER_CALL))
    if warm is not None:
        programs.prefill = programs.add(prefix_reuse.resume_program(engine, warm, prompt_len, schedule[0]))
    elif isinstance(strategy, OwnPrefill):
        programs.prefill = programs.add(strategy.prefill_program(engine, bucket, schedule[0]))
    else:
        programs.prefill = programs.add(engine.prefill_program(bucket, schedule[0], 1))
    programs.start = programs.add(kernel.start_program(schedule[0]))
    for old, new in zip(schedule, schedule[1:], strict=False) if decode else []:
        programs.growers[new] = programs.add(kernel.grow_program(old, new))
    return programs


def _stopped_compiling(request: Request, start: float) -> GenerationOutput:
    """Stopped before its programs were ready: no token, the compile time so far, and the compiles left running
    (their programs are kept for the next request that asks for them)."""
    return GenerationOutput(sequences=[[]], start_time=start, token_times=[], kv_cache_bytes=0,
                            compile_s=time.perf_counter() - start, forward_passes=0, stopped=True,
                            extra={"stopped_while_compiling": True, **engine_extra(request)})


def _prefill(request: Request, strategy: Strategy, seed: int) -> tuple[Run, Advance]:
    """The prompt padded on the right to its bucket into a new cache, and the strategy's first step from its
    logits (or, where the start only sets the state up, its first step program's call of one step), brought to
    the host."""
    args = strategy.args(request.engine)
    key = strategy.first_key(seed) if isinstance(strategy, ReplaysDraws) else seed
    state, record = start_prompt(request.engine, request.programs, request.prompt, request.bucket, key, args,
                                 request.warm)
    length = request.plan.lengths[0]
    run = Run(state=state, args=args, length=length, layouts=request.plan.at(length))
    if strategy.first_token_steps:
        return run, _read(request, run, strategy, _call(request, run, strategy, 1))
    return run, _read(request, run, strategy, (record, 1, strategy.kernel.finished(state)))


def _decode(request: Request, run: Run, strategy: Strategy, spec: RunSpec, emit: EmitTokens,
            should_stop: ShouldStop) -> None:
    """Device calls until the run is done, max_new_tokens or should_stop(), streaming each call's tokens."""
    while not run.done and run.produced < spec.max_new_tokens:
        limit = min(STEPS_PER_CALL, spec.max_new_tokens - run.produced)
        if should_stop():
            run.stopped, limit = True, strategy.stop(request, run)
            if not limit:
                return
        _grow_to_fit(request, run, strategy.width(request, run, limit))
        fetch = _call(request, run, strategy, limit)
        run.calls += 1
        advance = _read(request, run, strategy, fetch)
        if strategy.streams:
            emit(advance.tokens)


def _call(request: Request, run: Run, strategy: Strategy, limit: int) -> Any:
    """One device call: the plug-in's own, or up to `limit` steps of its kernel's step program (one while the
    host sends a constraint's masks after each); returns (records, count, finished) on the device."""
    if isinstance(strategy, OwnStep):
        return strategy.step(request, run, limit)
    program = request.programs.steps[run.layouts]
    steps = 1 if strategy.host_masks else limit
    run.state, records, count = program(request.engine.weights, run.state, request.scalar(steps), run.args)
    return records, count, strategy.kernel.finished(run.state)


def _read(request: Request, run: Run, strategy: Strategy, fetch: Any) -> Advance:
    """A call's results to the host (its one sync), read by the strategy and counted."""
    fetched = jax.device_get(fetch)
    advance = strategy.read(request, run, fetched, time.perf_counter())
    run.produced += advance.count
    run.done = advance.done
    run.kv_trace += [cache_bytes(run.state.cache)] * advance.count
    return advance


def _grow_to_fit(request: Request, run: Run, width: int) -> None:
    """Step through the plan's lengths until `width` more positions fit after the tokens so far; layers whose
    layout changes are copied into their larger arrays (bounded ones stop changing once they hold their window)."""
    lengths = request.plan.lengths
    needed = request.prompt.shape[1] + run.produced - 1 + width  # the last token is not in the cache yet
    while needed > run.length and run.length < lengths[-1]:
        run.length = lengths[lengths.index(run.length) + 1]
        layouts = request.plan.at(run.length)
        if layouts != run.layouts:
            run.state = request.programs.growers[layouts](run.state)
            run.layouts = layouts


def _output(request: Request, run: Run, strategy: Strategy, start: float) -> GenerationOutput:
    """The backends' common output: the strategy's outcome, with the timing, cache, compile and engine figures
    every strategy reports alike."""
    fields = strategy.outcome(request, run)
    extra = {**cache_extra(request, run), "cache_layers": cache_plan.describe(run.layouts)}
    if not isinstance(strategy, OwnStep):
        extra.update(steps_per_call=1 if strategy.host_masks else STEPS_PER_CALL, decode_calls=run.calls)
    extra.update(fields.pop("extra", {}))
    extra.update(engine_extra(request))
    if strategy.host_masks:
        extra["logits_width"] = request.engine.vocab_size
    return GenerationOutput(start_time=start, kv_cache_bytes=cache_bytes(run.state.cache),
                            compile_s=request.programs.compile_s, stopped=run.stopped, kv_trace=run.kv_trace,
                            extra=extra, **fields)


def cache_extra(request: Request, run: Run) -> dict[str, Any]:
    """`extra`'s cache figures: the prompt's bucket and the cache lengths stepped through."""
    lengths = list(request.plan.lengths)
    return {"prefill_bucket": request.bucket, "cache_length": run.length,
            "cache_lengths": lengths[: lengths.index(run.length) + 1]}


def engine_extra(request: Request) -> dict[str, Any]:
    """`extra`'s engine figures: weights moved, their precision and bytes on the devices, programs compiled,
    sharding."""
    engine = request.engine
    return {"weights_moved_s": 0.0 if request.reused else round(engine.move_s, 3),
            "device_weights": engine.precision, "device_weight_bytes": engine.weight_bytes,
            "compiled_programs": len(engine.programs),
            "program_cache_bytes": engine.programs.bytes, "program_cache_bound_bytes": engine.programs.bound,
            "program_cache_evictions": engine.programs.evictions,
            **engine.sharding_info}

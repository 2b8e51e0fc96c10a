"""Greedy and sampling decoding as a plug-in of the request loop: one token per step, a chunk per call."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import jax

from playground import registry
from playground.backends.base import GenerationOutput
from playground.backends.jax import sampling
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.caches.pytree import JaxCache, cache_bytes
from playground.backends.jax.chain import Context, history_capacity
from playground.backends.jax.compiling import Pending
from playground.backends.jax.engine import DecodeState, Engine
from playground.backends.jax.loop import cache_extra, engine_extra
from playground.backends.jax.masks import mask_stage, with_rows
from playground.backends.jax.records import Streamed
from playground.backends.jax.sampling import Knobs, SamplingMode, StepInfo
from playground.backends.jax.strategy import STEPS_PER_CALL, Advance, Request, Run
from playground.constraints.matching import Replay, allowed_tokens, replay, root_matcher, take
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


class PlainDecoding:
    """The engine's own start, decode-chunk and grow programs; every chunk streams as it reaches the host."""

    streams = True

    def __init__(self, spec: RunSpec, samples: bool) -> None:
        self.spec = spec
        self.samples = samples
        self.mode = SamplingMode()
        self.knob_values: Knobs = ()  # the chain's arguments, on the host
        self.eos: tuple[int, ...] = ()
        self.stream = Streamed()
        self.context: Context | None = None
        self.matcher: Any = None  # a constrained run's llguidance matcher, at the text so far
        self.mask_stage = -1  # the constraint's place among the chain's arguments

    def choose_tokens(self, bucket: int, context: Context, room: int = 0) -> None:
        """Fix the token choice's static mode and its knobs; a history the chain reads holds the prompt, every
        new token and `room` more (a verify pass's positions: each has a constraint mask row of its own)."""
        context = context._replace(rows=max(1, room))
        history = history_capacity(bucket, cache_plan.new_tokens(self.spec) + room)
        self.mode, self.knob_values = sampling.mode_for(self.spec, context, samples=self.samples, history=history)
        self.eos = context.eos
        self.context = context
        if self.spec.constraint != "none":
            spec = self.spec
            self.matcher = root_matcher(context.tokenizer, context.vocab_size, context.eos, spec.constraint,
                                        spec.constraint_text, spec.prefix_ids)
            self.mask_stage = mask_stage(self.mode.chain)
            self._next_mask()

    def _next_mask(self) -> None:
        """The constraint stage's argument: the tokens the grammar allows after the text so far."""
        assert self.context is not None
        allowed = allowed_tokens(self.matcher, self.context.vocab_size)
        self.knob_values = with_rows(self.knob_values, self.mask_stage, [allowed])

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        self.choose_tokens(bucket, context)
        return cache_plan.plan_cache(self.spec, engine.config, prompt_len, STEPS_PER_CALL), []

    def start_program(self, engine: Engine, bucket: int, layouts: Layouts) -> Pending:
        return engine.start_program(bucket, layouts, self.mode, self.eos)

    def step_programs(self, engine: Engine, layouts: Layouts) -> dict[Hashable, Pending]:
        return {layouts: engine.decode_program(layouts, STEPS_PER_CALL, self.mode, self.eos)}

    def grow_program(self, engine: Engine, old: Layouts, new: Layouts) -> Pending:
        return engine.grow_program(old, new, self.mode)

    def knobs(self, engine: Engine) -> Knobs:
        return engine.put(self.knob_values)

    def first_token(self, request: Request, logits: jax.Array, ids: jax.Array, true_len: jax.Array,
                    knobs: Knobs, cache: JaxCache) -> tuple[DecodeState[jax.Array], StepInfo]:
        """The start program's first token from the prefill's logits, seeded by the spec."""
        key = request.engine.put(jax.random.PRNGKey(self.spec.seed))
        state, info = request.programs.start(logits, ids, true_len, key, knobs, cache)
        return state, info

    def start(self, request: Request, logits: jax.Array, ids: jax.Array, true_len: jax.Array,
              knobs: Knobs, cache: JaxCache) -> tuple[DecodeState[jax.Array], Any]:
        """The first token; read as a one-row chunk (its StepInfo rows have the batch of one as leading axis)."""
        state, info = self.first_token(request, logits, ids, true_len, knobs, cache)
        return state, (state.token, info, 1)

    def width(self, request: Request, run: Run, limit: int) -> int:
        return limit

    def step(self, request: Request, run: Run, limit: int) -> Any:
        if self.matcher is not None:  # the mask is the host's: one step per call, a new mask before the next
            limit = 1
        decode = request.programs.steps[run.layouts]
        run.state, out, count = decode(request.engine.weights, run.state, request.scalar(limit), run.knobs)
        return out.tokens, out.info, count

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        tokens, info, count = fetched  # (steps,) tokens, -1 past `count`; (steps, ...) StepInfo rows
        chunk = [int(t) for t in tokens[: int(count)]]
        self.stream.add(chunk, info, now, self.stage_names(), self.mode.needs.carry)
        self._take(request, run, chunk)
        return Advance(chunk, len(chunk), done=not chunk or chunk[-1] in request.eos)

    def stage_names(self) -> tuple[str, ...]:
        """The names of the stages each token's record lists, in order: the chain's."""
        return self.mode.chain.names

    def _consume(self, request: Request, chunk: list[int]) -> bool:
        """A constrained run's matcher takes a call's kept tokens; False when there is nothing to take (no
        constraint, or an end token ended the run)."""
        if self.matcher is None or not chunk or chunk[-1] in request.eos:
            return False
        for token in chunk:
            if not take(self.matcher, token):  # drawn under the mask, so never; replay() would say where
                break
        return True

    def _take(self, request: Request, run: Run, chunk: list[int]) -> None:
        """_consume, then the next mask goes to the device before the next call."""
        if self._consume(request, chunk):
            self._next_mask()
            run.knobs = self.knobs(request.engine)

    def stop(self, request: Request, run: Run) -> int:
        return 0

    def output(self, request: Request, run: Run, start: float) -> GenerationOutput:
        return GenerationOutput(
            sequences=[self.stream.tokens],
            start_time=start,
            token_times=self.stream.times,
            kv_cache_bytes=cache_bytes(run.state.cache),
            compile_s=request.programs.compile_s,
            forward_passes=len(self.stream.tokens),  # the prefill gave the first token, one step each of the rest
            stopped=run.stopped,
            kv_trace=run.kv_trace,
            token_info=self.stream.info,
            extra={**cache_extra(request, run), "cache_layers": cache_plan.describe(run.layouts),
                   "steps_per_call": 1 if self.matcher is not None else STEPS_PER_CALL, "decode_calls": run.calls,
                   **engine_extra(request), **self._constraint_extra()},
            constraint_replay=self._replay(),
        )

    def _replay(self) -> list[Replay] | None:
        """A constrained run: the verdict's engine side, its tokens replayed from the root (as on PyTorch)."""
        if self.matcher is None or self.context is None:
            return None
        context, spec = self.context, self.spec
        return [replay(context.tokenizer, context.vocab_size, context.eos, spec.constraint, spec.constraint_text,
                       spec.prefix_ids, self.stream.tokens)]

    def _constraint_extra(self) -> dict[str, Any]:
        return {"logits_width": self.context.vocab_size} if self.matcher is not None and self.context else {}


def single_token(spec: RunSpec, draft: LoadedModel | None = None) -> PlainDecoding:
    """Strategies that decode one token per step (greedy, sampling): each token drawn with the spec's knobs
    where the strategy's registry entry samples, else the most likely one."""
    return PlainDecoding(spec, samples=registry.strategy(spec.strategy).samples(spec.assisted_sampling))

"""Greedy and sampling decoding as a plug-in of the request loop: one token per step, a chunk per call."""

from __future__ import annotations

from typing import Any

import jax

from playground import registry
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import CachePlan
from playground.backends.jax.chain import token_choice
from playground.backends.jax.chain.chain import Context, history_capacity
from playground.backends.jax.chain.masks import mask_stage, with_rows
from playground.backends.jax.chain.records import Streamed
from playground.backends.jax.chain.token_choice import ChainArgs, SamplingMode
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.engine.kernel import Kernel
from playground.backends.jax.strategies.plain_programs import plain_kernel
from playground.backends.jax.strategy import STEPS_PER_CALL, Advance, Request, Run
from playground.constraints.matching import Replay, allowed_tokens, replay, root_matcher, take
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


class PlainDecoding:
    """One token per step (plain_programs.py on the kernel); every chunk streams as it reaches the host."""

    streams = True
    first_token_steps = False
    # the same key splits at every token (a draw's, a random stage's): a forced prefix's draws are replayed
    replays_draws = True

    def __init__(self, spec: RunSpec, samples: bool) -> None:
        self.spec = spec
        self.samples = samples
        self.mode = SamplingMode()
        self.arg_values: ChainArgs = ()  # the chain's arguments, on the host
        self.eos: tuple[int, ...] = ()
        self.stream = Streamed()
        self.context: Context | None = None
        self.matcher: Any = None  # a constrained run's llguidance matcher, at the text so far
        self.mask_stage = -1  # the constraint's place among the chain's arguments
        self.kernel: Kernel[Any]

    def choose_tokens(self, bucket: int, context: Context, room: int = 0) -> None:
        """Fix the token choice's static mode and its args; a history the chain reads holds the prompt, every
        new token and `room` more (a verify pass's positions: each has a constraint mask row of its own)."""
        context = context._replace(rows=max(1, room))
        history = history_capacity(bucket, cache_plan.new_tokens(self.spec) + room)
        self.mode, self.arg_values = token_choice.mode_for(self.spec, context, samples=self.samples, history=history)
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
        self.arg_values = with_rows(self.arg_values, self.mask_stage, [allowed])

    def plan(self, config: Any, prompt_len: int) -> CachePlan:
        return cache_plan.plan_cache(self.spec, config, prompt_len, STEPS_PER_CALL)

    def first_key(self, seed: int) -> jax.Array:
        """The key the run's first draw takes: the one an uninterrupted run holds after the forced tokens."""
        steps = len(self.spec.prefix_ids) if self.replays_draws else 0
        return token_choice.replayed_key(seed, steps, self.mode)

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        self.choose_tokens(bucket, context)
        self.kernel = plain_kernel(engine, bucket, self.mode, self.eos)
        return self.plan(engine.config, prompt_len), []

    @property
    def host_masks(self) -> bool:
        return self.matcher is not None

    def args(self, engine: Engine) -> ChainArgs:
        return engine.put(self.arg_values)

    def width(self, request: Request, run: Run, limit: int) -> int:
        return limit

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        records, count, _ = fetched  # (steps,) tokens, -1 past `count`; (steps, ...) StepInfo rows
        chunk = [int(t) for t in records.tokens[: int(count)]]
        self.stream.add(chunk, records.info, now, self.stage_names(), self.mode.needs.carry)
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
            run.args = self.args(request.engine)

    def stop(self, request: Request, run: Run) -> int:
        return 0

    def outcome(self, request: Request, run: Run) -> dict[str, Any]:
        """The streamed tokens and their records; the prefill gave the first token, one step each the rest."""
        return {"sequences": [self.stream.tokens], "token_times": self.stream.times, "token_info": self.stream.info,
                "forward_passes": self.forward_passes(), "constraint_replay": self._replay()}

    def forward_passes(self) -> int:
        return len(self.stream.tokens)

    def _replay(self) -> list[Replay] | None:
        """A constrained run: the verdict's engine side, its tokens replayed from the root (as on PyTorch)."""
        if self.matcher is None or self.context is None:
            return None
        context, spec = self.context, self.spec
        return [replay(context.tokenizer, context.vocab_size, context.eos, spec.constraint, spec.constraint_text,
                       spec.prefix_ids, self.stream.tokens)]


def single_token(spec: RunSpec, draft: LoadedModel | None = None) -> PlainDecoding:
    """Strategies that decode one token per step (greedy, sampling): each token drawn with the spec's args
    where the strategy's registry entry samples, else the most likely one."""
    return PlainDecoding(spec, samples=registry.strategy(spec.strategy).samples(spec.assisted_sampling))

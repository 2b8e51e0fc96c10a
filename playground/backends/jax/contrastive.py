"""Contrastive search (Su et al., 2022) as a plug-in of the JAX request loop, giving transformers 4.52.4's tokens
(the PyTorch port, backends/torch/contrastive.py, says which of 4.52's behaviours are matched and why).

Its own prefill keeps the prompt's hidden states (the first context); the start sets up the search and runs its
first step through the decode program (one program for every step, asked for even when one token is wanted), so
the first token streams with the prompt's call; later calls run up to STEPS_PER_CALL steps, each one k-row
forward inside the call (contrastive_programs.py), and stream as they reach the host. Each token's record
carries the candidates with their probability, degeneration penalty and score, as on the PyTorch path. Every
cache runs: the k rows are gathered from and back to one row inside jit.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import jax
import numpy as np

from playground.backends.base import GenerationOutput, TokenInfo
from playground.backends.jax import contrastive_programs as programs
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.caches.pytree import JaxCache, cache_bytes
from playground.backends.jax.chain import Context, history_capacity
from playground.backends.jax.compiling import Pending
from playground.backends.jax.contrastive_programs import ContrastiveKnobs, ContrastiveMode
from playground.backends.jax.engine import Engine
from playground.backends.jax.loop import cache_extra, engine_extra
from playground.backends.jax.plain import PlainDecoding
from playground.backends.jax.strategy import STEPS_PER_CALL, Advance, Request, Run
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


def candidate_records(weighed: programs.Weighed, count: int) -> list[TokenInfo]:
    """The first `count` host rows of a chunk's Weighed as what a token record adds: (token id, p, penalty, score)
    per candidate, most probable first, as the PyTorch path's ContrastiveStep.token_info() gives them."""
    rows = [np.asarray(part)[:count] for part in weighed[:4]]
    return [{"candidates": [(int(t), float(p), float(d), float(s)) for t, p, d, s in zip(*row, strict=True)]}
            for row in zip(*rows, strict=True)]


class ContrastiveSearch(PlainDecoding):
    """Plain decoding's chain, records and constraint handling, with contrastive search's programs."""

    streams = True

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec, samples=False)
        self.search: ContrastiveMode | None = None
        self.first_call: Pending | None = None  # the decode program over the first layouts: the first step's

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        self.choose_tokens(bucket, context)
        layer = int(engine.config.num_hidden_layers)  # hidden_states[N]: the final norm's output
        capacity = history_capacity(bucket, cache_plan.new_tokens(self.spec))
        self.search = ContrastiveMode(self.mode, int(self.spec.top_k), capacity, self.eos, layer)
        # the loop counts the last token as not yet cached; here it is (4.52's look-ahead): a call of n steps
        # needs n + 1 positions by its count
        plan = cache_plan.plan_cache(self.spec, engine.config, prompt_len, STEPS_PER_CALL + 1)
        self.first_call = programs.decode_program(engine, plan.at(plan.lengths[0]), STEPS_PER_CALL, self.search)
        return plan, [self.first_call]

    def _search(self) -> ContrastiveMode:
        assert self.search is not None, "bind() fixes the mode first"
        return self.search

    def prefill_program(self, engine: Engine, bucket: int, layouts: Layouts) -> Pending:
        return programs.prefill_program(engine, bucket, layouts, self._search().layer)

    def start_program(self, engine: Engine, bucket: int, layouts: Layouts) -> Pending:
        return programs.start_program(engine, bucket, layouts, self._search())

    def step_programs(self, engine: Engine, layouts: Layouts) -> dict[Hashable, Pending]:
        return {layouts: programs.decode_program(engine, layouts, STEPS_PER_CALL, self._search())}

    def grow_program(self, engine: Engine, old: Layouts, new: Layouts) -> Pending:
        return programs.grow_program(engine, old, new, self._search())

    def knobs(self, engine: Engine) -> ContrastiveKnobs:
        alpha = float(self.spec.penalty_alpha)
        return engine.put(ContrastiveKnobs(self.knob_values, np.float32(1.0 - alpha), np.float32(alpha)))

    def start(self, request: Request, logits: Any, ids: jax.Array, true_len: jax.Array, knobs: Any,
              cache: JaxCache) -> tuple[Any, Any]:
        """The search set up from the prompt's forward (ContrastiveState), and its first step: the first token
        (`knobs` are ContrastiveKnobs: typed as plain decoding's, whose methods this plug-in shares)."""
        assert self.first_call is not None, "bind() asks for the first call's program"
        key = request.engine.put(jax.random.PRNGKey(self.spec.seed))
        state = request.programs.start(logits, ids, true_len, key, cache)
        state, out, count = self.first_call(request.engine.weights, state, request.scalar(1), knobs)
        return state, (out, count)

    def width(self, request: Request, run: Run, limit: int) -> int:
        return limit + 1  # the last chosen token is in the cache already (see bind)

    def step(self, request: Request, run: Run, limit: int) -> Any:
        if self.matcher is not None:  # the mask is the host's: one step per call, a new mask before the next
            limit = 1
        decode = request.programs.steps[run.layouts]
        run.state, out, count = decode(request.engine.weights, run.state, request.scalar(limit), run.knobs)
        return out, count

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        out, count = fetched
        chunk = [int(t) for t in out.tokens[: int(count)]]
        first = len(self.stream.info)
        self.stream.add(chunk, out.info, now, self.mode.chain.names)
        for known, weighed in zip(self.stream.info[first:], candidate_records(out.weighed, len(chunk)), strict=True):
            known.update(weighed)
        self._take(request, run, chunk)
        return Advance(chunk, len(chunk), done=not chunk or chunk[-1] in request.eos)

    def output(self, request: Request, run: Run, start: float) -> GenerationOutput:
        return GenerationOutput(
            sequences=[self.stream.tokens],
            start_time=start,
            token_times=self.stream.times,
            kv_cache_bytes=cache_bytes(run.state.cache),
            compile_s=request.programs.compile_s,
            forward_passes=1 + len(self.stream.tokens),  # the prefill, and one k-row forward per token
            stopped=run.stopped,
            kv_trace=run.kv_trace,
            token_info=self.stream.info,
            extra={**cache_extra(request, run), "cache_layers": cache_plan.describe(run.layouts),
                   "steps_per_call": 1 if self.matcher is not None else STEPS_PER_CALL, "decode_calls": run.calls,
                   **engine_extra(request), **self._constraint_extra()},
            constraint_replay=self._replay(),
        )


def contrastive(spec: RunSpec, draft: LoadedModel | None = None) -> ContrastiveSearch:
    """Strategy "contrastive": top_k candidates per step, the least degenerate of the likely ones kept."""
    return ContrastiveSearch(spec)

"""Contrastive search (Su et al., 2022) as a plug-in of the JAX request loop, giving transformers 4.52.4's tokens
(the PyTorch port, backends/torch/contrastive.py, says which of 4.52's behaviours are matched and why).

Its own prefill keeps the prompt's hidden states (the first context); the start sets up the search and the loop
runs its first step through the step program (one program for every step, asked for even when one token is
wanted), so the first token streams with the prompt's call; later calls run up to STEPS_PER_CALL steps, each one
k-row forward inside the call (contrastive_programs.py on the kernel), and stream as they reach the host. Each
token's record carries the candidates with their probability, degeneration penalty and score, as on the PyTorch
path. Every cache runs: the k rows are gathered from and back to one row inside jit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from playground.backends.base import TokenInfo
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.chain.chain import Context, history_capacity
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.strategies import contrastive_programs as programs
from playground.backends.jax.strategies.contrastive_programs import ContrastiveArgs, ContrastiveMode
from playground.backends.jax.strategies.plain import PlainDecoding
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
    first_token_steps = True  # the start sets the search up; the first step program's call chooses the first token

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec, samples=False)
        self.search: ContrastiveMode | None = None

    def plan(self, config: Any, prompt_len: int) -> CachePlan:
        # the loop counts the last token as not yet cached; here it is (4.52's look-ahead): a call of n steps
        # needs n + 1 positions by its count
        return cache_plan.plan_cache(self.spec, config, prompt_len, STEPS_PER_CALL + 1)

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        self.choose_tokens(bucket, context)
        layer = int(engine.config.num_hidden_layers)  # hidden_states[N]: the final norm's output
        capacity = history_capacity(bucket, cache_plan.new_tokens(self.spec))
        self.search = ContrastiveMode(self.mode, int(self.spec.top_k), capacity, self.eos, layer)
        self.kernel = programs.contrastive_kernel(engine, bucket, self.search)
        return self.plan(engine.config, prompt_len), []

    def _search(self) -> ContrastiveMode:
        assert self.search is not None, "bind() fixes the mode first"
        return self.search

    def prefill_program(self, engine: Engine, bucket: int, layouts: Layouts) -> Pending:
        return programs.prefill_program(engine, bucket, layouts, self._search().layer)

    def args(self, engine: Engine) -> ContrastiveArgs:
        alpha = float(self.spec.penalty_alpha)
        return engine.put(ContrastiveArgs(self.arg_values, np.float32(1.0 - alpha), np.float32(alpha)))

    def width(self, request: Request, run: Run, limit: int) -> int:
        return limit + 1  # the last chosen token is in the cache already (see plan)

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        """Plain decoding's reading, and each token's candidates as its record's `candidates`."""
        first = len(self.stream.info)
        advance = super().read(request, run, fetched, now)
        for known, weighed in zip(self.stream.info[first:], candidate_records(fetched[0].own, advance.count),
                                  strict=True):
            known.update(weighed)
        return advance

    def forward_passes(self) -> int:
        return 1 + len(self.stream.tokens)  # the prefill, and one k-row forward per token


def contrastive(spec: RunSpec, draft: LoadedModel | None = None) -> ContrastiveSearch:
    """Strategy "contrastive": top_k candidates per step, the least degenerate of the likely ones kept."""
    return ContrastiveSearch(spec)

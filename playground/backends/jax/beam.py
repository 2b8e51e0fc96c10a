"""Beam search as a plug-in of the request loop: transformers' beam search, K hypotheses as one batch.

The prompt is prefilled once (batch 1); each call then runs up to STEPS_PER_CALL beam steps in a lax.while_loop
(beam_programs.py), the cache reordered by the chosen parents inside jit, and returns the steps' candidates for
the beam tree as fixed-shape rows: one host sync per chunk. As on the PyTorch path, nothing streams while the
search runs (no hypothesis is final until it ends); the loop emits the best sequence whole.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import jax
import numpy as np

from playground.backends.base import GenerationOutput
from playground.backends.beam_nodes import BeamTree
from playground.backends.jax import beam_programs, chain
from playground.backends.jax.beam_programs import BeamState
from playground.backends.jax.beam_search import BeamKnobs, BeamMode, capacity_for
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.caches.pytree import JaxCache, cache_bytes
from playground.backends.jax.chain import Context, history_capacity
from playground.backends.jax.compiling import Pending
from playground.backends.jax.engine import Engine
from playground.backends.jax.loop import cache_extra, engine_extra
from playground.backends.jax.masks import RowMatchers, mask_stage
from playground.backends.jax.sampling import Knobs
from playground.backends.jax.strategy import STEPS_PER_CALL, Advance, Request, Run
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


class BeamSearch:
    """The beam programs; each call's step records go into the beam tree, and nothing streams."""

    streams = False

    def __init__(self, spec: RunSpec, samples: bool = False) -> None:
        self.spec = spec
        self.samples = samples  # beam sampling
        self.mode: BeamMode | None = None
        self.chain_knobs: Knobs = ()  # the chain's arguments, on the host
        self.tree = BeamTree()
        self.last: int | None = None  # the step the search must end at, once a stop sets it
        self.matchers: RowMatchers | None = None  # a constrained search's matcher per running beam

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        # transformers' beam search stops at the generation config's EOS ids
        spec = self.spec
        capacity = capacity_for(cache_plan.new_tokens(spec))
        # a constraint mask row per beam; beam sampling's filters keep one more token than there are end tokens,
        # as transformers' own list does
        keep = len(context.eos) + 1 if self.samples and context.eos else 1
        context = context._replace(rows=spec.num_beams, keep=keep)
        built, self.chain_knobs = chain.build(spec, context, sampling=self.samples,
                                              history=history_capacity(bucket, capacity))
        self.mode = BeamMode(spec.num_beams, capacity, context.eos, built, self.samples)
        if (stage := mask_stage(built)) >= 0:
            self.matchers = RowMatchers(spec, context, stage)
            self.chain_knobs = self.matchers.knobs(self.chain_knobs)
        return cache_plan.plan_cache(spec, engine.config, prompt_len, STEPS_PER_CALL), []

    def _mode(self) -> BeamMode:
        assert self.mode is not None, "bind() fixes the mode first"
        return self.mode

    def start_program(self, engine: Engine, bucket: int, layouts: Layouts) -> Pending:
        return beam_programs.start_program(engine, bucket, layouts, self._mode())

    def step_programs(self, engine: Engine, layouts: Layouts) -> dict[Hashable, Pending]:
        return {layouts: beam_programs.decode_program(engine, layouts, STEPS_PER_CALL, self._mode())}

    def grow_program(self, engine: Engine, old: Layouts, new: Layouts) -> Pending:
        return beam_programs.grow_program(engine, old, new, self._mode())

    def knobs(self, engine: Engine, last: int | None = None) -> BeamKnobs[jax.Array]:
        """The search's knobs; `last` is the step it must end at (max_new_tokens unless stopped)."""
        spec = self.spec
        self.last = last if last is not None else self.last
        last = self.last
        return engine.put(BeamKnobs(np.float32(spec.length_penalty), np.bool_(spec.early_stopping),
                                    np.int32(spec.max_new_tokens if last is None else last), self.chain_knobs))

    def start(self, request: Request, logits: jax.Array, ids: jax.Array, true_len: jax.Array,
              knobs: BeamKnobs[jax.Array], cache: JaxCache) -> tuple[BeamState, Any]:
        """The first beam step from the prompt's logits: one step's records, read as a chunk of one."""
        key = request.engine.put(jax.random.PRNGKey(self.spec.seed))
        state, record = request.programs.start(logits, ids, true_len, key, knobs, cache)
        return state, (record, 1, state.hyps.done)

    def width(self, request: Request, run: Run, limit: int) -> int:
        return limit  # the beams share one position: a step writes one slot per row

    def step(self, request: Request, run: Run, limit: int) -> Any:
        if self.matchers is not None:  # the masks are the host's: one step per call, new rows before the next
            limit = 1
        decode = request.programs.steps[run.layouts]
        run.state, records, count = decode(request.engine.weights, run.state, request.scalar(limit), run.knobs)
        return records, count, run.state.hyps.done

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        """`count` steps' candidates into the tree (records with a leading step axis, or one step's)."""
        records, count, done = fetched
        rows = [np.atleast_2d(np.asarray(r)) for r in records]  # (steps, K) each
        for parents, tokens, scores, finished, kept in zip(*(r[: int(count)] for r in rows), strict=True):
            self.tree.add_step(scores.tolist(), tokens.tolist(), parents.tolist())
            self.tree.select(finished.tolist(), kept.tolist())
            if self.matchers is not None and not done:  # each new beam's matcher from its parent's, masks sent
                self.matchers.follow(parents[kept].tolist(), tokens[kept].tolist())
                self.chain_knobs = self.matchers.knobs(self.chain_knobs)
                run.knobs = self.knobs(request.engine)
        if request.preview is not None and not done:
            request.preview(self.tree.leading())
        return Advance([], int(count), bool(done))

    def stop(self, request: Request, run: Run) -> int:
        """A stop ends the search as transformers does: the next step's candidates all count as stopped, so the
        best of them finish."""
        run.knobs = self.knobs(request.engine, run.produced + 1)
        return 1

    def _returned(self, run: Run) -> tuple[list[list[int]], list[float]]:
        """The best num_return_sequences finished hypotheses (new tokens, through their EOS) and their scores."""
        count = self.spec.num_return_sequences
        hyps = jax.device_get(run.state.hyps)
        sequences = [hyps.finished[i, : hyps.finished_lengths[i]].tolist() for i in range(count)]
        return sequences, [float(s) for s in hyps.finished_scores[:count]]

    def output(self, request: Request, run: Run, start: float) -> GenerationOutput:
        sequences, scores = self._returned(run)
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
            beam_tree=self.tree.tree(sequences[0]),
            constraint_replay=self.matchers.replay(sequences) if self.matchers is not None else None,
            extra={**cache_extra(request, run), "cache_layers": cache_plan.describe(run.layouts),
                   "beam_candidates": self._mode().candidates, "steps_per_call": STEPS_PER_CALL,
                   "decode_calls": run.calls, **engine_extra(request),
                   **({"logits_width": self.matchers.context.vocab_size} if self.matchers is not None else {})},
        )


def beam(spec: RunSpec, draft: LoadedModel | None = None) -> BeamSearch:
    """Strategy "beam": num_beams hypotheses searched together."""
    return BeamSearch(spec)


def beam_sample(spec: RunSpec, draft: LoadedModel | None = None) -> BeamSearch:
    """Strategy "beam_sample": beam search whose continuations are drawn from what the logits chain leaves."""
    return BeamSearch(spec, samples=True)

"""Diverse (group) beam search as a plug-in of the request loop: transformers 4.52's `_group_beam_search`.

All K beams of the G groups are one batch: the prompt is prefilled once, then each call runs up to
STEPS_PER_CALL steps in a lax.while_loop (group_beam_programs.py), each step taking the groups in order with
the Hamming penalty, 4.52's scorer and the cache reordered by parent rows inside jit (group_beam_search.py).
Each call hands back its steps' records as fixed-shape rows (one host sync per chunk); the host turns them into
the same per-beam records the PyTorch port keeps (diverse_beam.DiverseBeamStep), so that both backends build
the page's tree by group with the one function (group_tree.py). When the search ends the host pools and ranks
the groups' hypotheses as 4.52's `finalize` did (group_hypotheses.py). Nothing streams, as on PyTorch.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import jax
import numpy as np

from playground.backends.base import GenerationOutput, eos_ids
from playground.backends.group_tree import DiverseBeamStep, group_tree
from playground.backends.jax import chain, group_beam_programs
from playground.backends.jax.beam_search import capacity_for
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.caches.pytree import JaxCache, cache_bytes
from playground.backends.jax.chain import Context, history_capacity
from playground.backends.jax.compiling import Pending
from playground.backends.jax.engine import Engine
from playground.backends.jax.group_beam_programs import GroupState
from playground.backends.jax.group_beam_search import GroupKnobs, GroupMode
from playground.backends.jax.group_hypotheses import finalize
from playground.backends.jax.loop import cache_extra, engine_extra
from playground.backends.jax.masks import RowMatchers, mask_stage
from playground.backends.jax.sampling import Knobs
from playground.backends.jax.strategy import STEPS_PER_CALL, Advance, Request, Run
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


def special_tokens(config: Any, eos: tuple[int, ...]) -> tuple[int | None, int]:
    """The first EOS id (what 4.52 ended a shorter returned sequence with) in the model config's order, and the
    pad id a done group runs on (the config's, else that EOS, as the PyTorch path's generation config sets it).
    Without any EOS no group can finish early, and the pad is never used."""
    ordered = [e for e in eos_ids(config) if e in eos] or list(eos)
    first = ordered[0] if ordered else None
    pad = getattr(config, "pad_token_id", None)
    pad = pad if isinstance(pad, int) else first
    return first, 0 if pad is None else pad


class GroupBeamSearch:
    """The group beam programs; each call's records join the per-beam records, and nothing streams."""

    streams = False

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.mode: GroupMode | None = None
        self.chain_knobs: Knobs = ()
        self.eos_first: int | None = None
        self.steps: list[DiverseBeamStep] = []  # the records group_tree() reads, as the PyTorch port keeps them
        self.paid: np.ndarray = np.zeros(spec.num_beams)  # penalties each row's beam paid so far
        self.ending = False  # a stop asked for one last step
        self.matchers: RowMatchers | None = None  # a constrained search's matcher per row

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        spec = self.spec
        capacity = capacity_for(cache_plan.new_tokens(spec))
        context = context._replace(rows=spec.num_beams)  # a constraint mask row per beam
        built, self.chain_knobs = chain.build(spec, context, sampling=False,
                                              history=history_capacity(bucket, capacity))
        self.eos_first, pad = special_tokens(engine.config, context.eos)
        self.mode = GroupMode(spec.num_beams, spec.num_beam_groups, capacity, context.eos, pad, built)
        if (stage := mask_stage(built)) >= 0:
            self.matchers = RowMatchers(spec, context, stage)
            self.chain_knobs = self.matchers.knobs(self.chain_knobs)
        return cache_plan.plan_cache(spec, engine.config, prompt_len, STEPS_PER_CALL), []

    def _mode(self) -> GroupMode:
        assert self.mode is not None, "bind() fixes the mode first"
        return self.mode

    def start_program(self, engine: Engine, bucket: int, layouts: Layouts) -> Pending:
        return group_beam_programs.start_program(engine, bucket, layouts, self._mode())

    def step_programs(self, engine: Engine, layouts: Layouts) -> dict[Hashable, Pending]:
        return {layouts: group_beam_programs.decode_program(engine, layouts, STEPS_PER_CALL, self._mode())}

    def grow_program(self, engine: Engine, old: Layouts, new: Layouts) -> Pending:
        return group_beam_programs.grow_program(engine, old, new, self._mode())

    def knobs(self, engine: Engine) -> GroupKnobs[jax.Array]:
        spec = self.spec
        return engine.put(GroupKnobs(np.float32(spec.length_penalty), np.bool_(spec.early_stopping),
                                     np.float32(spec.diversity_penalty), self.chain_knobs))

    def start(self, request: Request, logits: jax.Array, ids: jax.Array, true_len: jax.Array,
              knobs: GroupKnobs[jax.Array], cache: JaxCache) -> tuple[GroupState, Any]:
        """The first step from the prompt's logits: one step's records, read as a chunk of one."""
        state, records = request.programs.start(logits, ids, true_len, knobs, cache)
        return state, (records, 1, state.hyps.done)

    def width(self, request: Request, run: Run, limit: int) -> int:
        return limit  # the rows share one position: a step writes one slot per row

    def step(self, request: Request, run: Run, limit: int) -> Any:
        if self.matchers is not None:  # the masks are the host's: one step per call, new rows before the next
            limit = 1
        decode = request.programs.steps[run.layouts]
        run.state, records, count = decode(request.engine.weights, run.state, request.scalar(limit), run.knobs)
        return records, count, run.state.hyps.done

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        """`count` steps' records into the per-beam records (and the matchers, when constrained)."""
        records, count, done = fetched
        for index in range(int(count)):
            parents, tokens, live = self._record(run.produced + index, [np.asarray(r)[index] for r in records])
            if self.matchers is not None and not done:  # a done group's rows keep their first row's matcher
                self.matchers.follow(parents, tokens, live)
                self.chain_knobs = self.matchers.knobs(self.chain_knobs)
                run.knobs = self.knobs(request.engine)
        return Advance([], int(count), bool(done) or self.ending)

    def _record(self, step: int, record: list[np.ndarray]) -> tuple[list[int], list[int], list[int]]:
        """One step's records as the PyTorch port appends them: per group not done, its finished hypotheses best
        first, then its beams in row order. Returns each row's parent row and token (a done group's rows copy
        its first row and take the pad), and the rows of the groups not done."""
        active, parents, tokens, scores, penalties, finished, kept = record
        mode, paid = self._mode(), self.paid.copy()
        rows_parents = [g * mode.size for g in range(mode.groups) for _ in range(mode.size)]
        rows_tokens, live = [mode.pad] * mode.beams, []
        for g in (g for g in range(mode.groups) if active[g]):
            for c in np.flatnonzero(finished[g]):
                self.steps.append(DiverseBeamStep(step, g, -1, int(parents[g, c]), int(tokens[g, c]),
                                                  float(scores[g, c]), float(penalties[g, c]),
                                                  float(paid[parents[g, c]] + penalties[g, c]), True))
            for b, c in enumerate(kept[g]):
                row = g * mode.size + b
                self.paid[row] = paid[parents[g, c]] + penalties[g, c]
                rows_parents[row], rows_tokens[row] = int(parents[g, c]), int(tokens[g, c])
                live.append(row)
                self.steps.append(DiverseBeamStep(step, g, row, rows_parents[row], rows_tokens[row],
                                                  float(scores[g, c]), float(penalties[g, c]), float(self.paid[row])))
        return rows_parents, rows_tokens, live

    def stop(self, request: Request, run: Run) -> int:
        """A stop ends the search after one more step, as the PyTorch port's stopping criteria end it after the
        step during which the stop came; then the groups' hypotheses are finalized as at the length limit."""
        self.ending = True
        return 1

    def output(self, request: Request, run: Run, start: float) -> GenerationOutput:
        spec, mode = self.spec, self._mode()
        sequences, scores = finalize(jax.device_get(run.state.hyps), mode.groups, spec.length_penalty,
                                     spec.num_return_sequences, spec.max_new_tokens, self.eos_first)
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
            beam_tree=group_tree(self.steps).tree(sequences[0]),
            constraint_replay=self.matchers.replay(sequences) if self.matchers is not None else None,
            extra={**cache_extra(request, run), "cache_layers": cache_plan.describe(run.layouts),
                   "beam_candidates": mode.groups * mode.candidates, "beam_groups": mode.groups,
                   "steps_per_call": 1 if self.matchers is not None else STEPS_PER_CALL, "decode_calls": run.calls,
                   **engine_extra(request),
                   **({"logits_width": self.matchers.context.vocab_size} if self.matchers is not None else {})},
        )


def group_beam(spec: RunSpec, draft: LoadedModel | None = None) -> GroupBeamSearch:
    """Strategy "diverse_beam": num_beams hypotheses in num_beam_groups groups searched together."""
    return GroupBeamSearch(spec)

"""Diverse (group) beam search as a plug-in of the request loop: transformers 4.52's `_group_beam_search`.

All K beams of the G groups are one batch: the prompt is prefilled once, then each call runs up to
STEPS_PER_CALL steps in a lax.while_loop (diverse_beam_programs.py), each step taking the groups in order with
the Hamming penalty, 4.52's scorer and the cache reordered by parent rows inside jit (diverse_beam_search.py).
Each call hands back its steps' records as fixed-shape rows (one host sync per chunk); the host turns them into
the same per-beam records the PyTorch port keeps (diverse_beam.DiverseBeamStep), so that both backends build
the page's tree by group with the one function (group_tree.py). When the search ends the host pools and ranks
the groups' hypotheses as 4.52's `finalize` did (diverse_beam_hypotheses.py). Nothing streams, as on PyTorch.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from playground.backends.base import eos_ids
from playground.backends.group_tree import DiverseBeamStep, group_tree
from playground.backends.jax.caches.plan import CachePlan
from playground.backends.jax.chain.chain import Context
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.engine.kernel import Kernel
from playground.backends.jax.strategies.beam import RowSearch
from playground.backends.jax.strategies.diverse_beam_hypotheses import finalize
from playground.backends.jax.strategies.diverse_beam_programs import DiverseBeamState, diverse_beam_kernel
from playground.backends.jax.strategies.diverse_beam_search import DiverseBeamArgs, DiverseBeamMode
from playground.backends.jax.strategy import Advance, Request, Run
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


class DiverseBeamSearch(RowSearch):
    """The group beam programs; each call's records join the per-beam records, and nothing streams."""

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec)
        self.mode: DiverseBeamMode | None = None
        self.eos_first: int | None = None
        self.steps: list[DiverseBeamStep] = []  # the records group_tree() reads, as the PyTorch port keeps them
        self.paid: np.ndarray = np.zeros(spec.num_beams)  # penalties each row's beam paid so far
        self.ending = False  # a stop asked for one last step
        self.kernel: Kernel[DiverseBeamState]

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        spec = self.spec
        context = context._replace(rows=spec.num_beams)  # a constraint mask row per beam
        built = self._chain(context, bucket, sampling=False)
        self.eos_first, pad = special_tokens(engine.config, context.eos)
        self.mode = DiverseBeamMode(spec.num_beams, spec.num_beam_groups, self.capacity(),
                                    context.eos, pad, built)
        self.kernel = diverse_beam_kernel(engine, bucket, self.mode)
        return self.plan(engine.config, prompt_len), []

    def _mode(self) -> DiverseBeamMode:
        assert self.mode is not None, "bind() fixes the mode first"
        return self.mode

    def args(self, engine: Engine) -> DiverseBeamArgs[jax.Array]:
        spec = self.spec
        return engine.put(DiverseBeamArgs(np.float32(spec.length_penalty), np.bool_(spec.early_stopping),
                                     np.float32(spec.diversity_penalty), self.chain_args))

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        """`count` steps' records into the per-beam records (and the matchers, when constrained)."""
        records, count, done = fetched
        for index in range(int(count)):
            parents, tokens, live = self._record(run.produced + index, [np.asarray(r)[index] for r in records])
            if self.matchers is not None and not done:  # a done group's rows keep their first row's matcher
                self.matchers.follow(parents, tokens, live)
                self.chain_args = self.matchers.args(self.chain_args)
                run.args = self.args(request.engine)
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

    def outcome(self, request: Request, run: Run) -> dict[str, Any]:
        spec, mode = self.spec, self._mode()
        sequences, scores = finalize(jax.device_get(run.state.hyps), mode.groups, spec.length_penalty,
                                     spec.num_return_sequences, spec.max_new_tokens, self.eos_first)
        return self._outcome(run, sequences, scores, group_tree(self.steps).tree(sequences[0]),
                             {"beam_candidates": mode.groups * mode.candidates, "beam_groups": mode.groups})


def diverse_beam(spec: RunSpec, draft: LoadedModel | None = None) -> DiverseBeamSearch:
    """Strategy "diverse_beam": num_beams hypotheses in num_beam_groups groups searched together."""
    return DiverseBeamSearch(spec)

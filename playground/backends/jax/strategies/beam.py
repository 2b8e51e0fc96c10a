"""Beam search as a plug-in of the request loop: transformers' beam search, K hypotheses as one batch.

The prompt is prefilled once (batch 1); each call then runs up to STEPS_PER_CALL beam steps in the kernel's
lax.while_loop (beam_programs.py), the cache reordered by the chosen parents inside jit, and returns the steps'
candidates for the beam tree as fixed-shape rows: one host sync per chunk. As on the PyTorch path, nothing
streams while the search runs (no hypothesis is final until it ends); the loop emits the best sequence whole.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from playground.backends.beam_nodes import BeamNode, BeamTree
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import CachePlan
from playground.backends.jax.chain import chain
from playground.backends.jax.chain.chain import Chain, Context, history_capacity
from playground.backends.jax.chain.masks import RowMatchers, mask_stage
from playground.backends.jax.chain.token_choice import ChainArgs
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.engine.kernel import Kernel
from playground.backends.jax.strategies.beam_programs import BeamState, beam_kernel
from playground.backends.jax.strategies.beam_search import BeamArgs, BeamMode, capacity_for
from playground.backends.jax.strategy import STEPS_PER_CALL, Advance, Request, Run
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


class RowSearch:
    """What beam search and diverse beam search share as plug-ins: K cache rows from the start, nothing streams,
    plain decoding's cache plan, and a constraint's matcher per row (its masks sent after every step)."""

    streams = False
    first_token_steps = False

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.chain_args: ChainArgs = ()  # the chain's arguments, on the host
        self.matchers: RowMatchers | None = None  # a constrained search's matcher per row

    def _chain(self, context: Context, bucket: int, sampling: bool) -> Chain:
        """The logits chain over a history of every step's tokens, with a constraint's mask row per beam."""
        built, self.chain_args = chain.build(self.spec, context, sampling=sampling,
                                             history=history_capacity(bucket, self.capacity()))
        if (stage := mask_stage(built)) >= 0:
            self.matchers = RowMatchers(self.spec, context, stage)
            self.chain_args = self.matchers.args(self.chain_args)
        return built

    def plan(self, config: Any, prompt_len: int) -> CachePlan:
        return cache_plan.plan_cache(self.spec, config, prompt_len, STEPS_PER_CALL)

    def capacity(self) -> int:
        """Token columns per hypothesis: the new tokens the request is sized for (a branch tree's, in step mode)."""
        return capacity_for(cache_plan.new_tokens(self.spec))

    @property
    def host_masks(self) -> bool:
        return self.matchers is not None

    def width(self, request: Request, run: Run, limit: int) -> int:
        return limit  # the rows share one position: a step writes one slot per row

    def _outcome(self, run: Run, sequences: list[list[int]], scores: list[float], tree: list[list[BeamNode]],
                 extra: dict[str, Any]) -> dict[str, Any]:
        return {"sequences": sequences, "scores": scores,
                "token_times": [],  # nothing streams during a beam search (as on the PyTorch path)
                "forward_passes": run.produced,  # the prefill and one batched forward per later step
                "beam_tree": tree,
                "constraint_replay": self.matchers.replay(sequences) if self.matchers is not None else None,
                "extra": extra}


class BeamSearch(RowSearch):
    """The beam programs; each call's step records go into the beam tree, and nothing streams."""

    def __init__(self, spec: RunSpec, samples: bool = False) -> None:
        super().__init__(spec)
        self.samples = samples  # beam sampling
        self.mode: BeamMode | None = None
        self.tree = BeamTree()
        self.last: int | None = None  # the step the search must end at, once a stop sets it
        self.kernel: Kernel[BeamState]

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        # transformers' beam search stops at the generation config's EOS ids
        spec = self.spec
        # a constraint mask row per beam; beam sampling's filters keep one more token than there are end tokens,
        # as transformers' own list does
        keep = len(context.eos) + 1 if self.samples and context.eos else 1
        context = context._replace(rows=spec.num_beams, keep=keep)
        built = self._chain(context, bucket, self.samples)
        self.mode = BeamMode(spec.num_beams, self.capacity(), context.eos, built, self.samples)
        self.kernel = beam_kernel(engine, bucket, self.mode)
        return self.plan(engine.config, prompt_len), []

    def _mode(self) -> BeamMode:
        assert self.mode is not None, "bind() fixes the mode first"
        return self.mode

    def args(self, engine: Engine, last: int | None = None) -> BeamArgs[jax.Array]:
        """The search's args; `last` is the step it must end at (max_new_tokens unless stopped)."""
        spec = self.spec
        self.last = last if last is not None else self.last
        last = self.last
        return engine.put(BeamArgs(np.float32(spec.length_penalty), np.bool_(spec.early_stopping),
                                    np.int32(spec.max_new_tokens if last is None else last), self.chain_args))

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        """`count` steps' candidates into the tree (records with a leading step axis, or one step's)."""
        records, count, done = fetched
        rows = [np.atleast_2d(np.asarray(r)) for r in records]  # (steps, K) each
        for parents, tokens, scores, finished, kept in zip(*(r[: int(count)] for r in rows), strict=True):
            self.tree.add_step(scores.tolist(), tokens.tolist(), parents.tolist())
            self.tree.select(finished.tolist(), kept.tolist())
            if self.matchers is not None and not done:  # each new beam's matcher from its parent's, masks sent
                self.matchers.follow(parents[kept].tolist(), tokens[kept].tolist())
                self.chain_args = self.matchers.args(self.chain_args)
                run.args = self.args(request.engine)
        if request.preview is not None and not done:
            request.preview(self.tree.leading())
        return Advance([], int(count), bool(done))

    def stop(self, request: Request, run: Run) -> int:
        """A stop ends the search as transformers does: the next step's candidates all count as stopped, so the
        best of them finish."""
        run.args = self.args(request.engine, run.produced + 1)
        return 1

    def _returned(self, run: Run) -> tuple[list[list[int]], list[float]]:
        """The best num_return_sequences finished hypotheses (new tokens, through their EOS) and their scores."""
        count = self.spec.num_return_sequences
        hyps = jax.device_get(run.state.hyps)
        sequences = [hyps.finished[i, : hyps.finished_lengths[i]].tolist() for i in range(count)]
        return sequences, [float(s) for s in hyps.finished_scores[:count]]

    def outcome(self, request: Request, run: Run) -> dict[str, Any]:
        sequences, scores = self._returned(run)
        return self._outcome(run, sequences, scores, self.tree.tree(sequences[0]),
                             {"beam_candidates": self._mode().candidates})


def beam(spec: RunSpec, draft: LoadedModel | None = None) -> BeamSearch:
    """Strategy "beam": num_beams hypotheses searched together."""
    return BeamSearch(spec)


def beam_sample(spec: RunSpec, draft: LoadedModel | None = None) -> BeamSearch:
    """Strategy "beam_sample": beam search whose continuations are drawn from what the logits chain leaves."""
    return BeamSearch(spec, samples=True)

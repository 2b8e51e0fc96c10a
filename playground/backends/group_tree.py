"""Diverse beam search's beam tree: either backend's per-step records (DiverseBeamStep) as the BeamNodes both
backends return, each with its group and the diversity penalty its token paid.

A step lists, group by group, the hypotheses that finished there (they took eos) and then the beams that
continue; nothing is pruned in between, since the loop records only what it kept. A node's parent is the node of
the beam row it extended at the step before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from playground.backends.beam_nodes import BeamTree
from playground.strategy_records.beam import BeamNode


@dataclass(frozen=True)
class DiverseBeamStep:
    """One beam after one step: `beam` is its row (group * group_size + i), `parent` the row it extended.
    `finished` marks a hypothesis that took eos (it holds no row: `beam` is -1). `score` is the running score as
    4.52 keeps it (summed log-probabilities minus penalties); `penalty` what this token paid, `paid` all so far."""

    step: int
    group: int
    beam: int
    parent: int
    token: int
    score: float
    penalty: float
    paid: float
    finished: bool = False


def group_tree(records: Sequence[DiverseBeamStep]) -> BeamTree:
    """The records, step by step, as a BeamTree (its `tree(best)` marks the returned path)."""
    tree = BeamTree()
    rows: dict[int, int] = {}  # beam row -> its node in the previous step
    for step in sorted({r.step for r in records}):
        nodes: list[BeamNode] = []
        now: dict[int, int] = {}
        for record in (r for r in records if r.step == step):
            nodes.append({"parent": rows.get(record.parent) if step else None, "token": record.token,
                          "score": record.score, "kept": not record.finished, "finished": record.finished,
                          "chosen": False, "group": record.group, "penalty": record.penalty})
            if not record.finished:
                now[record.beam] = len(nodes) - 1
        tree.steps.append(nodes)
        rows = now
    return tree

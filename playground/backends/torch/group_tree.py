"""Diverse beam search's beam tree: the loop's per-step records (diverse_beam.DiverseBeamStep) as the BeamNodes
both backends return, each with its group and the diversity penalty its token paid.

A step lists, group by group, the hypotheses that finished there (they took eos) and then the beams that
continue; nothing is pruned in between, since the loop records only what it kept. A node's parent is the node of
the beam row it extended at the step before.
"""

from __future__ import annotations

from collections.abc import Sequence

from playground.backends.base import BeamNode
from playground.backends.beam_nodes import BeamTree
from playground.backends.torch.diverse_beam import DiverseBeamStep


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

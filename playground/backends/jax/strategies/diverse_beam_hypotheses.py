"""The end of a JAX diverse beam search on the host: 4.52's `BeamSearchScorer.finalize` over the device's groups.

The device keeps each group's finished hypotheses (diverse_beam_search.py) with the order they were added in;
here, as 4.52 did, the running beams of every group that is not done join their group's hypotheses (by the
same `BeamHypotheses.add`, in Python floats as 4.52 computed them), all groups' are pooled, and the best
`count` returned, best score first (not by group). A returned sequence shorter than the longest one plus one
(capped at max_new_tokens) ends with the first EOS id, whatever EOS its hypothesis took: 4.52 padded them so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Hypothesis = tuple[float, list[int]]  # (length-penalized score, new tokens without the EOS)


def add(beams: list[Hypothesis], size: int, score: float, tokens: list[int]) -> None:
    """BeamHypotheses.add for a score already length-penalized: joins while fewer than `size` are held or when
    it beats the worst, which then leaves (of equal worst ones the earliest added)."""
    worst = min((s for s, _ in beams), default=1e9)
    if len(beams) < size or score > worst:
        beams.append((score, tokens))
        if len(beams) > size:
            ranked = sorted((s, i) for i, (s, _) in enumerate(beams))
            del beams[ranked[0][1]]


def group_hypotheses(hyps: Any, groups: int, length_penalty: float) -> list[list[Hypothesis]]:
    """Each group's hypotheses on the host, in the order added, with the running beams of the groups not done
    added as 4.52's finalize adds them (their running score over the steps done, to the length penalty)."""
    size = len(hyps.held) // groups
    produced = int(hyps.produced)
    out: list[list[Hypothesis]] = []
    for group in range(groups):
        rows = range(group * size, (group + 1) * size)
        slots = sorted((int(hyps.stamps[i]), i) for i in rows if hyps.held[i])
        beams = [(float(hyps.finished_scores[i]), hyps.finished[i, : int(hyps.finished_lengths[i]) - 1].tolist())
                 for _, i in slots]
        if not hyps.group_done[group]:
            for row in rows:
                score = float(hyps.running_scores[row]) / produced ** length_penalty
                add(beams, size, score, hyps.running[row, :produced].tolist())
        out.append(beams)
    return out


def finalize(hyps: Any, groups: int, length_penalty: float, count: int, max_new_tokens: int,
             eos_first: int | None) -> tuple[list[list[int]], list[float]]:
    """The best `count` hypotheses of all groups pooled, best first (of equal scores the later group's and the
    later added first, as 4.52 popped them from its stable sort), and their scores as float32."""
    pooled = sorted((h for beams in group_hypotheses(hyps, groups, length_penalty) for h in beams),
                    key=lambda h: h[0])
    best = [pooled.pop() for _ in range(min(count, len(pooled)))]
    width = min(max((len(tokens) for _, tokens in best), default=0) + 1, max_new_tokens)
    sequences = [tokens + [eos_first] if len(tokens) < width and eos_first is not None else tokens
                 for _, tokens in best]
    return sequences, [float(np.float32(score)) for score, _ in best]

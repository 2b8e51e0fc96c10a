"""What a beam knob changed between beam-search columns: the hypotheses the searches finished, each with its
log-probability and length, and its score and rank under each column's length penalty.

A length penalty does not change which beams a search keeps running: those are ranked by cumulative
log-probability. It changes the score of a hypothesis that finished (log-probability / length ** penalty), and
with it which finished hypotheses are returned, in what order, and when the search may stop. Two columns that
differ only in the penalty often return the same best text, so the page shows the ranking itself.

A hypothesis is a candidate that stopped (EOS or the length limit) among the `num_beams` best candidates of its
step: the ones beam search adds to its finished list (transformers' `_update_finished_beams`). It is read from
each column's beam tree; those that a column returned are found by their score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from playground.result import BeamRecord, Result
from playground.ui.tokens import ordinal

SHOWN = 8  # hypotheses listed, best ranked first; the rest are counted
# a returned score and a hypothesis' score recomputed from its float32 cumulative log-probability agree to float32
# rounding, which grows with the score: at length_penalty -2 a 15-token hypothesis scores log-prob * 225, and the
# two differed by 7e-4 at -579
SCORE_MATCH_ABS, SCORE_MATCH_REL = 1e-4, 1e-5


@dataclass(frozen=True)
class Hypothesis:
    tokens: tuple[int, ...]  # the new tokens: what tells two hypotheses apart (two may decode to one text)
    text: str  # the new text, token texts joined, the EOS token's left out
    length: int  # new tokens, the stopping one included: the length the penalty divides by
    log_prob: float  # cumulative log-probability
    by_length_limit: bool  # stopped at max_new_tokens rather than at EOS

    def score(self, length_penalty: float) -> float:
        return self.log_prob / self.length ** length_penalty


@dataclass(frozen=True)
class BeamColumn:
    label: str
    length_penalty: float
    returned: list[float]  # the returned sequences' scores, best first
    hypotheses: list[Hypothesis]


def _path(steps: Sequence[Sequence[BeamRecord]], step: int, index: int) -> list[BeamRecord]:
    """The nodes from the first step to `steps[step][index]`."""
    nodes: list[BeamRecord] = []
    node: int | None = index
    for s in range(step, -1, -1):
        if node is None:
            break
        nodes.append(steps[s][node])
        node = steps[s][node]["parent"]
    return nodes[::-1]


def finished_hypotheses(steps: Sequence[Sequence[BeamRecord]], num_beams: int, max_new_tokens: int) -> list[Hypothesis]:
    """Every candidate that stopped among its step's `num_beams` best, oldest first."""
    found = []
    for s, step in enumerate(steps):
        for index, node in enumerate(step[:num_beams]):
            if node["finished"]:
                path, by_limit = _path(steps, s, index), s + 1 >= max_new_tokens
                text = "".join(n["text"] for n in (path if by_limit else path[:-1]))
                found.append(Hypothesis(tuple(n["token"] for n in path), text, s + 1, node["score"], by_limit))
    return found


def beam_columns(results: Sequence[Result | None], labels: Sequence[str]) -> list[BeamColumn]:
    """The finished beam-search columns of the first beam column's model and prompt."""
    columns, first = [], None
    for label, result in zip(labels, results, strict=True):
        if not result or not result["beam_tree"] or not result["scores"]:
            continue
        if any("group" in node for node in result["beam_tree"][0]):  # diverse beam search: its scores hold the
            continue  # diversity penalties, and its finished hypotheses are per group, not among num_beams best
        spec = result["spec"]
        key = (spec["model"], spec["weights"], result["prompt_tokens"])
        first = first or key
        if key != first:
            continue
        columns.append(BeamColumn(label, float(spec["length_penalty"]), list(result["scores"]),
                                  finished_hypotheses(result["beam_tree"], int(spec["num_beams"]),
                                                      int(spec["max_new_tokens"]))))
    return columns


def _union(columns: Sequence[BeamColumn]) -> list[Hypothesis]:
    """Each distinct hypothesis once (the searches find the same ones when only a penalty differs)."""
    seen: dict[tuple[int, ...], Hypothesis] = {}
    for column in columns:
        for hypothesis in column.hypotheses:
            seen.setdefault(hypothesis.tokens, hypothesis)
    return list(seen.values())


def ranked(hypotheses: Sequence[Hypothesis], columns: Sequence[BeamColumn]) -> dict[tuple[int, ...], list[int]]:
    """Each hypothesis' place (1 = best) under each column's length penalty, keyed by its tokens."""
    ranks: dict[tuple[int, ...], list[int]] = {h.tokens: [] for h in hypotheses}
    for column in columns:
        scores = {h.tokens: h.score(column.length_penalty) for h in hypotheses}
        order = sorted(hypotheses, key=lambda h: -scores[h.tokens])
        for place, hypothesis in enumerate(order, 1):
            ranks[hypothesis.tokens].append(place)
    return ranks


def returned_ranks(column: BeamColumn) -> dict[tuple[int, ...], int]:
    """Each returned sequence's hypothesis (by tokens) and its place, 1 = best: the column's own hypothesis whose
    recomputed score is nearest the returned score, each used once (two hypotheses can score alike to 1e-4)."""
    found: dict[tuple[int, ...], int] = {}
    for rank, returned in enumerate(column.returned, 1):
        free = [h for h in column.hypotheses if h.tokens not in found]
        nearest = min(free, key=lambda h: abs(h.score(column.length_penalty) - returned), default=None)
        if nearest is not None and abs(nearest.score(column.length_penalty) - returned) <= (
                SCORE_MATCH_ABS + SCORE_MATCH_REL * abs(returned)):
            found[nearest.tokens] = rank
    return found


def _quoted(text: str, limit: int = 48) -> str:
    shown = " ".join(text.split())
    if not shown:
        return "(no text)"
    # hypotheses of one search share their start: the end tells them apart
    if len(shown) > limit:
        shown = shown[:limit // 2 - 2].rstrip() + " … " + shown[-(limit - limit // 2 - 1):]
    return "`" + shown.replace("`", "'").replace("|", "¦") + "`"


def beam_comparison(results: Sequence[Result | None], labels: Sequence[str]) -> str:
    """Markdown: for two or more beam columns of one model and prompt, the finished hypotheses ranked under each
    column's length penalty, and which each column returned; empty otherwise."""
    columns = beam_columns(results, labels)
    if len(columns) < 2:
        return ""
    hypotheses = _union(columns)
    ranks = ranked(hypotheses, columns)
    ordered = sorted(hypotheses, key=lambda h: min(ranks[h.tokens]))
    returned = [returned_ranks(c) for c in columns]
    header = ["hypothesis", "tokens", "log-prob"] + [f"{c.label}<br>length_penalty {c.length_penalty:g}"
                                                    for c in columns]
    rows = [" | ".join(header), " | ".join(["---", "---:", "---:"] + ["---"] * len(columns))]
    for h in ordered[:SHOWN]:
        cells = [_quoted(h.text) + (" (length limit)" if h.by_length_limit else " + EOS"), str(h.length),
                 f"{h.log_prob:.2f}"]
        for c, rank, by_tokens in zip(columns, ranks[h.tokens], returned, strict=True):
            cell = f"{h.score(c.length_penalty):.3f} · ranks {ordinal(rank)}"
            place = by_tokens.get(h.tokens)
            cells.append(f"**{cell}, returned {ordinal(place)}**" if place else cell)
        rows.append(" | ".join(cells))
    more = len(ordered) - SHOWN
    return "\n".join([
        "", "", f"**Beam search: what the length penalty re-ranked** ({len(hypotheses)} finished hypotheses; score = "
            "log-prob / tokens<sup>length_penalty</sup>; bold: returned by that column)",
        "", _summary(columns, ordered, ranks), "", *rows,
        *(["", f"{more} more finished hypotheses, ranked lower under every penalty, are not listed."]
          if more > 0 else []),
    ])


def _summary(columns: Sequence[BeamColumn], ordered: Sequence[Hypothesis],
             ranks: dict[tuple[int, ...], list[int]]) -> str:
    """One sentence: whether the penalties put the same hypothesis first."""
    firsts = [next(h for h in ordered if ranks[h.tokens][j] == 1) for j in range(len(columns))]
    if all(f is firsts[0] for f in firsts):
        return (f"Every penalty ranks {_quoted(firsts[0].text)} ({firsts[0].length} tokens) first, so the best text "
                "is the same; the penalties differ in the order below it and in when the search could stop.")
    return "; ".join(f"{c.label} ranks {_quoted(f.text)} ({f.length} tokens) first" for c, f in zip(
        columns, firsts, strict=True)) + "."

"""What a beam knob changed between beam-search columns: the hypotheses the searches finished, each with its
log-probability and length, and its score and rank under each column's length penalty.

A length penalty does not change which beams a search keeps running: those are ranked by cumulative
log-probability. It changes the score of a hypothesis that finished (log-probability / length ** penalty), and
with it which finished hypotheses are returned, in what order, and when the search may stop. Two columns that
differ only in the penalty often return the same best text, so the page shows the ranking itself.

A hypothesis is a candidate that stopped (EOS or the length limit) among the `num_beams` best candidates of its
step: the ones beam search adds to its finished list (transformers' `_update_finished_beams`). It is read from
each column's beam tree; those that a column returned are found by their score.

Rankings are compared only between columns that ran the same search: the same model, prompt and settings, seed
and backend included, differing only in how finished hypotheses are ranked (SAME_SEARCH_BUT). Columns that ran
different searches (another backend, seed or beam count) found other hypotheses: ranking one column's under
another's penalty would invent ranks for texts that search never produced, so each lists its own, side by side.
Hypotheses of one search share their start, so a text is shown from where it departs from its nearest sibling,
with the whole text on hover and on keyboard focus.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from playground.result import Result
from playground.strategy_records.beam import BeamRecord
from playground.ui.tokens import ordinal

SHOWN = 8  # hypotheses listed, best ranked first; the rest are counted
# a returned score and a hypothesis' score recomputed from its float32 cumulative log-probability agree to float32
# rounding, which grows with the score: at length_penalty -2 a 15-token hypothesis scores log-prob * 225, and the
# two differed by 7e-4 at -579
SCORE_MATCH_ABS, SCORE_MATCH_REL = 1e-4, 1e-5
# what only ranks the finished hypotheses (or ends the search sooner): columns differing in nothing else searched
# the same beams; `repeats` only times the run again
SAME_SEARCH_BUT = ("length_penalty", "num_return_sequences", "early_stopping", "repeats")
SHOWN_CHARS = 44  # characters of a hypothesis shown in a cell; the whole text on hover and focus
LEAD_CHARS = 10  # of those, the start kept when the shown part is taken from where the text departs
BEFORE_DEPARTURE = 14  # characters shown before the point where a text departs from its nearest sibling
# a hypothesis' text in markdown: these would otherwise format or split the table
MARKDOWN_ENTITIES = str.maketrans({c: f"&#{ord(c)};" for c in "|*_`[]~\\"})


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
    search: tuple[Any, ...] = ()  # what decided the search: columns with equal keys searched the same beams


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


def search_key(result: Result) -> tuple[Any, ...]:
    """Everything that decides which beams a column's search ran: its spec but for SAME_SEARCH_BUT, and its prompt."""
    spec = result["spec"]
    return (result["prompt_tokens"], *sorted((k, repr(v)) for k, v in spec.items() if k not in SAME_SEARCH_BUT))


def beam_columns(results: Sequence[Result | None], labels: Sequence[str]) -> list[BeamColumn]:
    """The finished beam-search columns (diverse beam search left out), each with the key of its search."""
    columns = []
    for label, result in zip(labels, results, strict=True):
        if not result or not result["beam_tree"] or not result["scores"]:
            continue
        if any("group" in node for node in result["beam_tree"][0]):  # diverse beam search: its scores hold the
            continue  # diversity penalties, and its finished hypotheses are per group, not among num_beams best
        spec = result["spec"]
        columns.append(BeamColumn(label, float(spec["length_penalty"]), list(result["scores"]),
                                  finished_hypotheses(result["beam_tree"], int(spec["num_beams"]),
                                                      int(spec["max_new_tokens"])), search_key(result)))
    return columns


def searches(columns: Sequence[BeamColumn]) -> list[list[BeamColumn]]:
    """The columns grouped by the search they ran, in page order of each group's first column."""
    groups: dict[tuple[Any, ...], list[BeamColumn]] = {}
    for column in columns:
        groups.setdefault(column.search, []).append(column)
    return list(groups.values())


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


def departures(texts: Sequence[str]) -> list[int]:
    """Per text, where it departs from the most alike of the others (its longest common start with any of them)."""
    return [max((len(os.path.commonprefix([text, other])) for j, other in enumerate(texts) if j != i), default=0)
            for i, text in enumerate(texts)]


def excerpt(text: str, departs_at: int, limit: int = SHOWN_CHARS) -> str:
    """The part of `text` that tells it apart: its start, then from a little before where it departs from its
    nearest sibling; ellipses where text is left out."""
    if len(text) <= limit:
        return text
    start = departs_at - BEFORE_DEPARTURE
    if start <= LEAD_CHARS + 2:  # the departure is within the first window
        return text[:limit].rstrip() + " …"
    start = min(start, len(text) - (limit - LEAD_CHARS))
    space = text.rfind(" ", start - 8, start)
    start = space + 1 if space > LEAD_CHARS else start
    window = text[start:start + limit - LEAD_CHARS]
    end = text.find(" ", LEAD_CHARS - 2)  # whole words where one ends nearby: "it reflects", not "it reflect"
    lead = text[:end] if 0 < end <= LEAD_CHARS + 4 else text[:LEAD_CHARS]
    return (lead.rstrip() + " … " + window.strip()
            + (" …" if start + len(window) < len(text) else ""))


def _quoted(text: str, departs_at: int | None = None) -> str:
    """A hypothesis in a markdown cell: the part that tells it apart, the whole text on hover and focus."""
    shown = " ".join(text.split())
    if not shown:
        return "(no text)"
    at = len(shown) if departs_at is None else len(" ".join(text[:departs_at].split()))
    short = excerpt(shown, at)
    if short == shown:
        return f"<code class='hyp'>{html.escape(shown).translate(MARKDOWN_ENTITIES)}</code>"
    full = html.escape(shown, quote=True).translate(MARKDOWN_ENTITIES)
    return (f"<code class='hyp' tabindex='0' title='{full}'><span class='hyp-short'>"
            f"{html.escape(short).translate(MARKDOWN_ENTITIES)}</span><span class='hyp-full'>{full}</span></code>")


def _header(column: BeamColumn) -> str:
    """The column's name, and its length penalty unless the name already says it."""
    if "length penalty" in column.label:
        return column.label
    return f"{column.label}<br>length_penalty {column.length_penalty:g}"


def ranking_table(columns: Sequence[BeamColumn]) -> list[str]:
    """Markdown lines: one search's finished hypotheses ranked under each of its columns' length penalties."""
    hypotheses = _union(columns)
    ranks = ranked(hypotheses, columns)
    ordered = sorted(hypotheses, key=lambda h: min(ranks[h.tokens]))
    returned = [returned_ranks(c) for c in columns]
    shown = ordered[:SHOWN]
    at = departures([h.text for h in shown])
    header = ["hypothesis", "tokens", "log-prob"] + [_header(c) for c in columns]
    rows = [" | ".join(header), " | ".join(["---", "---:", "---:"] + ["---"] * len(columns))]
    for h, departs in zip(shown, at, strict=True):
        cells = [_quoted(h.text, departs) + (" (length limit)" if h.by_length_limit else " + EOS"), str(h.length),
                 f"{h.log_prob:.2f}"]
        for c, rank, by_tokens in zip(columns, ranks[h.tokens], returned, strict=True):
            cell = f"{h.score(c.length_penalty):.3f} · ranks {ordinal(rank)}"
            place = by_tokens.get(h.tokens)
            cells.append(f"**{cell}, returned {ordinal(place)}**" if place else cell)
        rows.append(" | ".join(cells))
    more = len(ordered) - SHOWN
    names = " and ".join(c.label.split(":", 1)[0] for c in columns)
    return [
        "", "", f"**Beam search: what the length penalty re-ranked** (columns {names}, one search: "
                f"{len(hypotheses)} finished hypotheses; score = log-prob / tokens<sup>length_penalty</sup>; bold: "
                "returned by that column)",
        "", _summary(columns, ordered, ranks), "", *rows,
        *(["", f"{more} more finished hypotheses, ranked lower under every penalty, are not listed."]
          if more > 0 else []),
    ]


def best_first(column: BeamColumn) -> list[Hypothesis]:
    """A column's own hypotheses, best first under its own length penalty."""
    return sorted(column.hypotheses, key=lambda h: -h.score(column.length_penalty))


def own_hypotheses_table(columns: Sequence[BeamColumn]) -> list[str]:
    """Markdown lines: columns that ran different searches, each with its own finished hypotheses, best first
    under its own penalty, side by side."""
    returned = [returned_ranks(c) for c in columns]
    ranked_own = [best_first(c)[:SHOWN] for c in columns]
    rows = [" | ".join(["rank"] + [_header(c) for c in columns]), " | ".join(["---:"] + ["---"] * len(columns))]
    at = [departures([h.text for h in own]) for own in ranked_own]
    for place in range(max(len(own) for own in ranked_own)):
        cells = [ordinal(place + 1)]
        for c, own, departs, by_tokens in zip(columns, ranked_own, at, returned, strict=True):
            if place >= len(own):
                cells.append("")
                continue
            h = own[place]
            cell = f"{_quoted(h.text, departs[place])} · {h.length} tokens · {h.score(c.length_penalty):.3f}"
            back = by_tokens.get(h.tokens)
            cells.append(f"**{cell}, returned {ordinal(back)}**" if back else cell)
        rows.append(" | ".join(cells))
    names = ", ".join(c.label.split(":", 1)[0] for c in columns)
    who = f"columns {names} ran different searches" if len(columns) > 1 else f"column {names} ran a search of its own"
    return ["", "", f"**Beam search: each column's own hypotheses** ({who}: settings other than the length penalty "
                    "differ, so each found other hypotheses and none is ranked under another's penalty; score = "
                    "log-prob / tokens<sup>length_penalty</sup>; bold: returned)",
            "", *rows]


def beam_comparison(results: Sequence[Result | None], labels: Sequence[str]) -> str:
    """Markdown for two or more beam columns: the columns that ran one search, their finished hypotheses ranked
    under each one's length penalty; the columns whose searches differ, their own hypotheses side by side; empty
    with fewer than two."""
    columns = beam_columns(results, labels)
    if len(columns) < 2:
        return ""
    groups = searches(columns)
    lines = [line for group in groups if len(group) > 1 for line in ranking_table(group)]
    alone = [group[0] for group in groups if len(group) == 1]
    if alone and len(groups) > 1:
        lines += own_hypotheses_table(alone)
    return "\n".join(lines)


def _summary(columns: Sequence[BeamColumn], ordered: Sequence[Hypothesis],
             ranks: dict[tuple[int, ...], list[int]]) -> str:
    """One sentence: whether the penalties put the same hypothesis first."""
    firsts = [next(h for h in ordered if ranks[h.tokens][j] == 1) for j in range(len(columns))]
    if all(f is firsts[0] for f in firsts):
        return (f"Every penalty ranks {_quoted(firsts[0].text)} ({firsts[0].length} tokens) first, so the best text "
                "is the same; the penalties differ in the order below it and in when the search could stop.")
    return "; ".join(f"{c.label} ranks {_quoted(f.text)} ({f.length} tokens) first" for c, f in zip(
        columns, firsts, strict=True)) + "."

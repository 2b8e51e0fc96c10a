"""Beam search you can watch: every returned sequence with its score, and the search as a tree (SVG).

Each step is a column of the candidates beam search weighed, best first; a line joins each to the beam it
extends. Kept candidates are solid, pruned ones faint, finished ones boxed, and the returned best path is
highlighted, so the user sees where the winner was not the greedy choice.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from playground.result import Result
from playground.strategy_records.beam import BeamRecord
from playground.ui.strategy_view import StrategyView

STEP_WIDTH = 92  # px per step
ROW_HEIGHT = 30  # px per candidate
NODE_WIDTH = 80
NODE_HEIGHT = 22
MAX_STEPS = 96  # longer searches are cut here, with a note, to keep the page light
FITS_WIDTH = 560  # px: a wider tree overflows a column card on a laptop (and any tree wider than ~3 steps on a phone)
IMPOSSIBLE = -1e8  # a candidate's score at or below this is not a hypothesis (see _possible)
GROUP_BAR = 4  # px: the stripe on a node's left edge that colours it by its group (diverse beam search)


def _token(text: str) -> str:
    shown = text.replace("\n", "↵") if text.strip() else text.replace(" ", "·") or "∅"
    return html.escape(shown if len(shown) <= 9 else shown[:8] + "…")


def _node(x: float, y: float, node: BeamRecord) -> str:
    state = "chosen" if node["chosen"] else "finished" if node["finished"] else "kept" if node["kept"] else "pruned"
    about = f"{node['text']!r}: cumulative log-prob {node['score']:.3f} ({state})"
    stripe = ""
    if "group" in node:
        about += f", group {node['group'] + 1}, diversity penalty paid here {node.get('penalty', 0.0):.2f}"
        stripe = (f"<rect class='beam-group g{node['group'] % 4}' x='{x:.0f}' y='{y:.0f}' width='{GROUP_BAR}' "
                  f"height='{NODE_HEIGHT}'/>")
    title = html.escape(about, quote=True)
    return (f"<g class='beam-node {state}'><title>{title}</title>"
            f"<rect x='{x:.0f}' y='{y:.0f}' width='{NODE_WIDTH}' height='{NODE_HEIGHT}' rx='4'/>{stripe}"
            f"<text x='{x + 4:.0f}' y='{y + 15:.0f}'>{_token(node['text'])}</text>"
            f"<text class='score' x='{x + NODE_WIDTH - 3:.0f}' y='{y + 15:.0f}' text-anchor='end'>"
            f"{node['score']:.1f}</text></g>")


def _possible(steps: Sequence[Sequence[BeamRecord]]) -> list[list[tuple[BeamRecord, int | None]]]:
    """Each step's candidates but the impossible ones, each with its parent's row among those shown: the
    continuations of beams that do not exist yet (transformers starts them at -1e9, and a constraint that allows
    fewer continuations than beams keeps some of them running), tokens a constraint masked out (-inf), and
    whatever descends from them. The returned path is always shown."""
    shown: list[list[tuple[BeamRecord, int | None]]] = []
    rows: dict[int, int] = {}  # the previous step's index -> its row among those shown
    for step in steps:
        kept: list[tuple[BeamRecord, int | None]] = []
        now: dict[int, int] = {}
        for index, node in enumerate(step):
            parent = node["parent"]
            reachable = parent is None or parent in rows
            if node["chosen"] or (reachable and node["score"] > IMPOSSIBLE):
                now[index] = len(kept)
                kept.append((node, rows.get(parent) if parent is not None else None))
        shown.append(kept)
        rows = now
    return shown


def tree_svg(steps: Sequence[Sequence[BeamRecord]]) -> str:
    """The search as an SVG: columns of candidates, lines to their parents."""
    shown = _possible(steps[:MAX_STEPS])
    rows = max((len(step) for step in shown), default=0)
    width, height = len(shown) * STEP_WIDTH + 8, rows * ROW_HEIGHT + 8
    lines, nodes = [], []
    for s, step in enumerate(shown):
        for r, (node, parent_row) in enumerate(step):
            x, y = 4 + s * STEP_WIDTH, 4 + r * ROW_HEIGHT
            if parent_row is not None and s:
                px, py = 4 + (s - 1) * STEP_WIDTH + NODE_WIDTH, 4 + parent_row * ROW_HEIGHT + NODE_HEIGHT / 2
                state = "chosen" if node["chosen"] else "kept" if node["kept"] or node["finished"] else "pruned"
                lines.append(f"<line class='beam-edge {state}' x1='{px:.0f}' y1='{py:.0f}' x2='{x:.0f}' "
                             f"y2='{y + NODE_HEIGHT / 2:.0f}'/>")
            nodes.append(_node(x, y, node))
    return (f"<svg class='beam-svg' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
            f"role='img' aria-label='beam search tree'>{''.join(lines)}{''.join(nodes)}</svg>")


def beam_html(result: Result | None) -> str:
    """Returned sequences with their scores, the legend and the tree; empty for a run without beam search."""
    if not result or not result["beam_tree"]:
        return ""
    scores = result["scores"] or []
    items = "".join(f"<li><b>{score:.3f}</b> {html.escape(text)}</li>"
                    for text, score in zip(result["sequences"], scores, strict=False))
    steps = len(result["beam_tree"])
    note = f" Showing the first {MAX_STEPS} of {steps} steps." if steps > MAX_STEPS else ""
    if min(steps, MAX_STEPS) * STEP_WIDTH > FITS_WIDTH:
        note += f" The tree is {min(steps, MAX_STEPS)} steps wide: scroll it sideways →"
    grouped = any("group" in node for step in result["beam_tree"] for node in step)
    if grouped:
        groups = 1 + max(node.get("group", 0) for step in result["beam_tree"] for node in step)
        swatches = " ".join(f"<span class='beam-swatch g{g % 4}'></span>group {g + 1}" for g in range(groups))
        note = (f" Stripes: {swatches}; a node's tooltip gives the diversity penalty its token paid, which stays "
                f"in the numbers (as transformers 4.52 kept it).{note}")
    penalty = " − diversity penalties paid" if grouped else ""
    return ("<div class='beam-view'><div class='beam-head'>Returned sequences (score = (log-probability"
            f"{penalty}) / length<sup>length_penalty</sup>, best first):</div><ol>{items}</ol>"
            "<div class='beam-legend'><span class='chosen'>returned best path</span> · <span class='kept'>kept"
            "</span> · <span class='pruned'>pruned</span> · <span class='finished'>finished (EOS or length)"
            f"</span> · numbers: cumulative log-probability.{note}</div>"
            f"<div class='beam-scroll'>{tree_svg(result['beam_tree'])}<span class='beam-more'></span></div></div>")


BEAM_CSS = """
.beam-view { font-size: 0.86em; color: var(--body-text-color); }
.beam-view ol { margin: 2px 0 4px 1.2em; padding: 0; }
.beam-legend { color: var(--body-text-color-subdued); margin-bottom: 4px; }
.beam-legend .chosen { color: #b45309; font-weight: 600; }
.dark .beam-legend .chosen { color: #fbbf24; }
.beam-legend .pruned { opacity: 0.55; }
.beam-scroll { overflow-x: auto; max-width: 100%; border: 1px solid var(--border-color-primary); border-radius: 8px;
               background: var(--background-fill-primary); }
/* a tree wider than its card fades out at the card's right edge, so a cut node reads as "more this way": the fade
   is a sticky strip after the tree, which rests past the tree's end once scrolled there (or when the tree fits) */
.beam-scroll { display: flex; }
.beam-scroll > svg { flex: none; }
.beam-more { flex: none; width: 40px; position: sticky; right: 0; pointer-events: none;
             background: linear-gradient(to right, transparent, var(--background-fill-primary) 85%); }
.beam-svg text { font-family: var(--font-mono); font-size: 11px; fill: var(--body-text-color); }
.beam-svg text.score { font-size: 9px; fill: var(--body-text-color-subdued); }
.beam-svg rect { fill: var(--background-fill-secondary); stroke: var(--border-color-primary); }
.beam-node.kept rect { stroke: var(--body-text-color-subdued); }
.beam-node.pruned { opacity: 0.45; }
.beam-node.finished rect { stroke-width: 2; stroke-dasharray: 3 2; }
.beam-svg .beam-node rect.beam-group { stroke: none; stroke-width: 0; }
.beam-node rect.beam-group.g0 { fill: #2563eb; } .beam-swatch.g0 { background: #2563eb; }
.beam-node rect.beam-group.g1 { fill: #db2777; } .beam-swatch.g1 { background: #db2777; }
.beam-node rect.beam-group.g2 { fill: #059669; } .beam-swatch.g2 { background: #059669; }
.beam-node rect.beam-group.g3 { fill: #9333ea; } .beam-swatch.g3 { background: #9333ea; }
.beam-swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin: 0 3px 0 6px; }
.beam-node.chosen rect { fill: #fde68a; stroke: #b45309; stroke-width: 2; }
.beam-node.chosen text { fill: #111; }
.beam-edge { stroke: var(--border-color-primary); stroke-width: 1; }
.beam-edge.kept { stroke: var(--body-text-color-subdued); }
.beam-edge.pruned { opacity: 0.45; }
.beam-edge.chosen { stroke: #b45309; stroke-width: 2.5; }
"""


class BeamView(StrategyView):
    """Beam search's, beam sampling's and diverse beam search's view: the returned sequences and the search's
    tree in the column's view box, and the finished hypotheses ranked across beam columns."""

    css = BEAM_CSS

    def box_html(self, result: Result) -> str:
        return beam_html(result)

    def across_columns(self, results: Sequence[Result | None], labels: Sequence[str]) -> str:
        from playground.ui.beam_compare import beam_comparison  # it draws its tables with this module's pieces

        return beam_comparison(results, labels)

"""The sampling cut of one token: its top candidates under the model and as drawn, and what each stage of the
logits chain removed and moved.

Pure functions from a token record and the spec its column ran with, so the chart means the same for every
column and backend: the backends record, per alternative, the first stage that removed it, and per stage the
tokens it removed and the probability mass it moved.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from playground import registry
from playground.registry import chain
from playground.result import Result, TokenRecord
from playground.spec import RunSpec, spec_keys
from playground.ui.strategy_view import view_of

NOTHING_PICKED = "click or tap a token first"


class CutRow(TypedDict):
    """One candidate of the chart."""

    id: int | None
    text: str
    p_model: float | None  # the model's own softmax at temperature 1
    p: float | None  # as drawn: after repetition penalty, temperature and the filters (0: removed)
    removed_by: str | None  # the filter (with its setting) that removed it; None: it stayed in the draw
    drawn: bool  # the token the column produced here


def _spec(spec: Mapping[str, Any]) -> RunSpec:
    """The column's spec (a result carries every key; a partial one takes defaults for the rest)."""
    return RunSpec.from_dict({k: v for k, v in spec.items() if k in spec_keys()})


def _own_stages(record: TokenRecord, spec: Mapping[str, Any]) -> dict[str, str]:
    """The column's strategy's own stages ahead of the chain in this token's record (DoLa's contrast), named."""
    return view_of(spec.get("strategy")).stage_labels(record)


def filter_labels(spec: Mapping[str, Any]) -> dict[str, str]:
    """Each stage of the chain, named with the setting the column applied."""
    run = _spec(spec)
    return {stage.name: stage.describe(run) for stage in registry.processors()}


def cut_rows(record: TokenRecord, spec: Mapping[str, Any]) -> list[CutRow]:
    """The recorded alternatives (the model's most likely first), then the drawn token when it was not among
    them. Empty when the backend kept no per-token distribution (beam search, assisted decoding)."""
    labels = filter_labels(spec) | _own_stages(record, spec)
    rows: list[CutRow] = []
    for alt in record.get("alternatives") or []:
        removed = alt["removed_by"]
        rows.append({"id": alt["id"], "text": alt["text"], "p_model": alt["p_model"], "p": alt["p"],
                     "removed_by": labels.get(removed, removed) if removed else None,
                     "drawn": alt["id"] == record["id"]})
    if rows and not any(row["drawn"] for row in rows):
        rows.append({"id": record["id"], "text": record["text"], "p_model": record["p_model"], "p": record["p"],
                     "removed_by": None, "drawn": True})
    return rows


def applied_filters(record: TokenRecord, spec: Mapping[str, Any]) -> str:
    """What stood between the model's distribution and the draw, in the order it was applied."""
    own = _own_stages(record, spec)
    return "; ".join([*own.values(), chain.describe(_spec(spec))]) if own else chain.describe(_spec(spec))


def stage_rows_html(record: TokenRecord, spec: Mapping[str, Any]) -> str:
    """Every active stage in order (a strategy's own stage, DoLa's contrast, ahead of the chain): the tokens it
    removed and the probability mass it moved."""
    run = _spec(spec)
    shown = [row for row in record.get("stages") or [] if not registry.has_processor(row["stage"])
             or registry.processor(row["stage"]).shown(run)]
    if not shown:
        return ""
    labels = filter_labels(spec) | _own_stages(record, spec)
    rows = "".join(
        f"<tr><td>{html.escape(labels.get(row['stage'], row['stage']))}</td><td>{row['removed']}</td>"
        f"<td>{row['moved']:.3f}</td></tr>" for row in shown)
    return ("<table class='cut-stages'><thead><tr><th>stage, in order</th><th>tokens removed</th>"
            "<th title='total variation between the distributions before and after the stage'>mass moved</th>"
            f"</tr></thead><tbody>{rows}</tbody></table>")


def removal_summary(rows: Sequence[CutRow]) -> str:
    """How many of the shown candidates each filter removed, and the model probability they carried."""
    removed: dict[str, list[float]] = {}
    for row in rows:
        if row["removed_by"]:
            removed.setdefault(row["removed_by"], []).append(row["p_model"] or 0.0)
    if not removed:
        return f"every one of the {len(rows)} candidates shown stayed in the draw"
    parts = [f"{name} removed {len(ps)} (model p {sum(ps):.3f} in all)" for name, ps in removed.items()]
    return f"of the {len(rows)} candidates shown, " + "; ".join(parts)


def _bar(kind: str, value: float | None) -> str:
    width = 0.0 if value is None else max(0.0, min(value, 1.0)) * 100
    shown = "–" if value is None else f"{value:.3f}"
    return (f"<div class='cut-bar {kind}'><span style='width:{width:.1f}%'></span></div>"
            f"<span class='cut-num'>{shown}</span>")


def _row_html(row: CutRow) -> str:
    token = html.escape(repr(row["text"]))
    mark = "<span class='cut-drawn'>◀ drawn</span>" if row["drawn"] else ""
    removed = (f"<span class='cut-removed'>✂ {html.escape(row['removed_by'])}</span>" if row["removed_by"]
               else "<span class='cut-kept'>kept</span>")
    classes = "cut-row" + (" drawn" if row["drawn"] else "") + (" removed" if row["removed_by"] else "")
    return (f"<div class='{classes}' data-token-id='{row['id']}'><code class='cut-token'>{token}</code>"
            f"<div class='cut-bars'>{_bar('model', row['p_model'])}{_bar('drawn', row['p'])}</div>"
            f"<div class='cut-note'>{removed}{mark}</div></div>")


def cut_html(result: Result | None, position: int | None, column: str) -> str:
    """The chart for token `position` (counted over the forced prefix and the generated tokens) of a result."""
    if result is None or position is None:
        return ("<div class='cut empty'>Click or tap a token in a column's token view to see its sampling cut: "
                "the model's top candidates, what the filters removed, and which one was drawn.</div>")
    prefix = result.get("prefix") or None
    forced = len(prefix["ids"]) if prefix else 0
    head = f"<div class='cut-head'><b>{html.escape(column)}</b>, token {position}"
    if position < forced:
        assert prefix is not None
        piece = html.escape(repr(prefix["pieces"][position]))
        return (f"<div class='cut'>{head}: <code>{piece}</code> was forced (the branch's prefix); "
                "nothing was drawn there. Pick a generated token.</div></div>")
    record = result["tokens"][position - forced]
    rows = cut_rows(record, result["spec"])
    head += f": <code>{html.escape(repr(record['text']))}</code></div>"
    head += view_of(result["spec"].get("strategy")).panel_html(record, result["spec"])
    if not rows:
        return (f"<div class='cut'>{head}<p>This strategy keeps no per-token distribution "
                f"({html.escape(str(result['spec'].get('strategy')))}: several hypotheses or draft tokens per step)."
                " You can still branch here from a greedy or sampling column.</p></div>")
    legend = ("<div class='cut-legend'><span class='cut-key model'></span>model's own p (temperature 1) "
              "<span class='cut-key drawn'></span>p as drawn (after the logits chain)</div>")
    filters = html.escape(applied_filters(record, result["spec"]))
    return (f"<div class='cut'>{head}<div class='cut-filters'>{filters}</div>"
            f"{legend}{''.join(_row_html(row) for row in rows)}"
            f"<div class='cut-summary'>{html.escape(removal_summary(rows))}</div>"
            f"{stage_rows_html(record, result['spec'])}</div>")


def branch_choices(result: Result | None, position: int | None) -> list[tuple[str, int]]:
    """(label, token id) of every candidate at `position` one can continue with, removed ones included."""
    if result is None or position is None:
        return []
    forced = len((result.get("prefix") or {"ids": []})["ids"])
    if position < forced:
        return []
    rows = cut_rows(result["tokens"][position - forced], result["spec"])
    return [(f"{row['text']!r}" + (" (as drawn)" if row["drawn"] else f" (model p {row['p_model'] or 0:.3f})"),
             int(row["id"])) for row in rows if row["id"] is not None]


def branch_prefix(result: Result, position: int, token_id: int) -> list[int]:
    """The forced ids of a branch at `position`: the output up to there (its own prefix included), then the
    chosen token."""
    prefix = result.get("prefix") or None
    ids = (list(prefix["ids"]) if prefix else []) + list(result["token_ids"])
    return ids[:position] + [int(token_id)]


# A token view's click (a tap on a phone) reports the token's position; the clicked token stays outlined. It
# does not keep the focus: a focused token docks its alternatives at the foot of the screen (for keyboard users,
# style.py), where they would cover the sampling cut the click has just opened with the same figures.
PICK_TOKEN_JS = """
element.addEventListener('click', (event) => {
  const token = event.target.closest('[data-pos]');
  if (!token || !element.contains(token)) return;
  document.querySelectorAll('.tok.picked').forEach((t) => t.classList.remove('picked'));
  token.classList.add('picked');
  token.blur();
  trigger('click', {position: Number(token.dataset.pos)});
});
"""

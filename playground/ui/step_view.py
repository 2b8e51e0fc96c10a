"""Step mode's two views per column: the candidates at the current position (one button each) and the branch tree
(every branch; each token a button that resumes there)."""

from __future__ import annotations

import html
from typing import Any, cast

import gradio as gr

from playground import registry
from playground.result import TokenRecord
from playground.ui.step_runs import draws_each_token, searches_beams, seeded_each_token
from playground.ui.step_tree import StepTree
from playground.ui.strategy_view import view_of
from playground.ui.tokens import tokens_html

# a click on a candidate or on a node reports its token id or node index (wiring reads it from the event)
STEP_CLICK_JS = """
element.addEventListener('click', (event) => {
  const hit = event.target.closest('[data-token],[data-node]');
  if (!hit || !element.contains(hit)) return;
  if (hit.dataset.token !== undefined) trigger('click', {token: Number(hit.dataset.token)});
  else trigger('click', {node: Number(hit.dataset.node)});
});
"""
SHOWN_CHARS = 80  # a branch's text shows its last characters; the whole text is its title


def step_views(index: int) -> tuple[gr.HTML, gr.HTML]:
    """A column's two step-mode views (inside its output card, so they follow the column's visibility)."""
    candidates = gr.HTML("", elem_id=f"step-candidates-{index}", elem_classes=["step-view"], js_on_load=STEP_CLICK_JS)
    branches = gr.HTML("", elem_id=f"branches-{index}", elem_classes=["step-view"], js_on_load=STEP_CLICK_JS)
    return candidates, branches


def _piece(text: str) -> str:
    shown = html.escape(text).replace("\n", "↵")
    return shown if text.strip() else shown.replace(" ", "·") or "∅"


def _cut_line(record: dict[str, Any], spec: dict[str, Any]) -> str:
    """That step's cut: each stage of the chain with the tokens it removed and the mass it moved (min_new_tokens,
    always in the chain so that a new value compiles nothing, only when it is set)."""
    stages = [s for s in record.get("stages") or [] if s["stage"] != "min_new_tokens" or spec["min_new_tokens"]]
    if not stages:
        return "<div class='step-cut'>no stage of the chain applied at this step</div>"
    parts = [f"{html.escape(s['stage'])}: removed {s['removed']}, moved {s['moved']:.3f}" for s in stages]
    return "<div class='step-cut'>cut: " + " → ".join(parts) + "</div>"


def _beams_html(tree: StepTree) -> str:
    beams = tree.last.get("beams") or []
    if not beams:
        return "<div class='step-empty'>press Step: the beams after each token appear here</div>"
    rows = "".join(f"<li><span class='beam-score'>{score:.3f}</span> {html.escape(text[-SHOWN_CHARS:])}</li>"
                   for text, score in beams)
    return (f"<div class='step-head'>beams after {tree.last.get('depth', 0)} tokens (beam search keeps every "
            f"hypothesis, so there is no single token to fork at)</div><ol class='step-beams'>{rows}</ol>")


def shown_candidates(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's recorded candidates (the model's top few), then the drawn token when a sample took it from
    outside them, marked `outside`: a Step's candidates always hold the token it drew."""
    alternatives = list(record.get("alternatives") or [])
    if not alternatives or any(alt["id"] == record["id"] for alt in alternatives):
        return alternatives
    return [*alternatives, {"id": record["id"], "text": record["text"], "p": record.get("p"),
                            "p_model": record.get("p_model"), "logprob_model": record.get("logprob_model"),
                            "removed_by": None, "outside": True}]


def _p(value: float | None) -> str:
    """A probability to three places; one below 0.001 (a token drawn far out in the tail) in scientific form."""
    if value is None:
        return "?"
    return f"{value:.3f}" if value >= 0.001 or value == 0 else f"{value:.1e}"


def candidates_html(tree: StepTree | None, note: str = "") -> str:
    """The candidates at the current node's position, after the chain: text, p as drawn, p_model, and what
    removed it; the current token marked. A click forces it (a fork)."""
    warn = f"<div class='step-note'>{html.escape(note)}</div>" if note else ""
    if tree is None:
        return warn + "<div class='step-empty'>press Step to advance this column one token</div>"
    if searches_beams(tree.spec):
        return warn + _beams_html(tree)
    if tree.current is None:
        return warn + "<div class='step-empty'>at the prompt: press Step</div>"
    node = tree.nodes[tree.current]
    record = node.record
    if record is None:
        return warn + "<div class='step-empty'>typed (forced): press Step to see what follows</div>"
    buttons = []
    # a strategy that weighs candidates of its own may choose past the top five
    taken = "drawn" if draws_each_token(tree.spec) else "chosen"
    for alt in shown_candidates(record):
        cut = f" ✂ {html.escape(alt['removed_by'])}" if alt["removed_by"] else ""
        chosen = " chosen" if alt["id"] == node.token else ""
        outside = (f"<i class='cand-outside'>{taken} from outside the top {len(record['alternatives'])}</i>"
                   if alt.get("outside") else "")
        buttons.append(f"<button type='button' class='cand{chosen}{' cut' if cut else ''}' data-token='{alt['id']}' "
                       f"title='force this token here'><b>{_piece(alt['text'])}</b> "
                       f"<span>p {_p(alt['p'])} · p_model {_p(alt['p_model'])}{cut}</span>{outside}</button>")
    if not buttons:
        buttons.append("<div class='step-empty'>this strategy recorded no candidates for the token</div>")
    position = len(tree.path()) - 1
    head = f"<div class='step-head'>token {position}: candidates after the chain (a click forces one)</div>"
    if seeded_each_token(tree.spec):
        head += (f"<div class='step-head'>sampled with seed {tree.spec['seed']} + {position}: a Step here draws "
                 "the same token again, Step 8 draws as eight Steps; a whole run's draw here may differ</div>")
    elif draws_each_token(tree.spec):
        head += (f"<div class='step-head'>sampled with seed {tree.spec['seed']}, its draws before token {position} "
                 "replayed: the whole run's draw here</div>")
    ended = "<div class='step-note'>the text ended here</div>" if node.ended else ""
    return (warn + head + "<div class='step-cands'>" + "".join(buttons) + "</div>" + _cut_line(record, tree.spec)
            + view_of(tree.spec["strategy"]).step_lines(cast(TokenRecord, record)) + tree.last.get("note", "") + ended)


def branch_records(tree: StepTree) -> list[TokenRecord]:
    """The current branch's tokens as a run's records: a drawn token with its step's record; a picked one with
    that record's figures for it (the same distribution, without what the method weighed for the token it took);
    a typed one bare, as no step scored it."""
    records: list[TokenRecord] = []
    unweighed = {record.key: None for entry in registry.strategies() for record in entry.token_records}
    for i in tree.path():
        node = tree.nodes[i]
        record = node.record
        if record is None:
            records.append(cast(TokenRecord, {"id": node.token, "text": node.text, "p": None, "entropy": None,
                                              "p_model": None, "entropy_model": None, "top": None, **unweighed}))
        elif record["id"] == node.token:
            records.append(cast(TokenRecord, dict(record)))
        else:
            alt = next((a for a in record.get("alternatives") or [] if a["id"] == node.token), None)
            figures = {key: alt.get(key) if alt else None for key in ("p", "p_model", "logprob", "logprob_model")}
            records.append(cast(TokenRecord, {**record, "id": node.token, "text": node.text, **figures,
                                              **unweighed}))
    return records


# heads a token view that shows a branch, so that the colour toggle knows to redraw the branch, not the last run
BRANCH_NOTE = ("<div class='step-head'>the branch's tokens (step mode): a token of the branch tree below resumes "
               "there and shows its candidates</div>")


def shows_branch(tokens_view: str | None) -> bool:
    """Whether a column's token view shows its step branch (a run since then drew its own tokens there)."""
    return str(tokens_view or "").startswith(BRANCH_NOTE)


def strip_html(tree: StepTree, colour_by: str) -> str:
    """The column's token view for the branch it stands on: its tokens coloured as a run's are. A click on one
    does not open the sampling cut (the page's cut is the last run's); the candidates under it are the step's."""
    return BRANCH_NOTE + tokens_html(branch_records(tree), colour_by, pickable=False)


def branches_html(tree: StepTree | None) -> str:
    """Every branch: its tokens (each a button that resumes there), where it forked and its log-probability."""
    if tree is None or searches_beams(tree.spec) or not tree.nodes:
        return ""
    on_path = set(tree.path())
    rows = []
    for branch in tree.branches():
        tokens = "".join(f"<button type='button' class='bnode{' here' if i == tree.current else ''}"
                         f"{' on' if i in on_path else ''} how-{tree.nodes[i].how}' data-node='{i}' "
                         f"title='resume at token {depth}'>{_piece(tree.nodes[i].text)}</button>"
                         for depth, i in enumerate(tree.path(branch.leaf)))
        fork = "first branch" if branch.forked_at is None else f"forked at token {branch.forked_at}"
        unscored = f", {branch.unscored} typed token(s) not scored" if branch.unscored else ""
        rows.append(f"<li title=\"{html.escape(branch.text, quote=True)}\"><div class='bmeta'>{fork} · "
                    f"{branch.length} tokens · log p {branch.logprob:.2f}{unscored}</div>"
                    f"<div class='btokens'>{tokens}</div></li>")
    return ("<div class='step-head'>branches (a token resumes there; Step continues from the marked one)</div>"
            f"<ul class='branches'>{''.join(rows)}</ul>")

# theme variables wherever they serve, so light and dark keep their contrast; a picked or typed node is marked
# by its border, the node a step continues from by the primary colour
STEP_CSS = """
.step-bar { align-items: center; }
.step-bar button { white-space: nowrap; }
.step-status { font-size: 0.9em; }
.step-view { font-size: 0.88em; }
.step-head { color: var(--body-text-color-subdued); margin: 4px 0 2px; }
.step-empty { color: var(--body-text-color-subdued); font-style: italic; }
.step-note { color: #b45309; }
.dark .step-note { color: #fbbf24; }
.step-cands { display: flex; flex-wrap: wrap; gap: 4px; }
.step-cands .cand { display: inline-flex; flex-direction: column; align-items: flex-start; gap: 1px;
                    padding: 3px 8px; border: 1px solid var(--border-color-primary); border-radius: 6px;
                    background: var(--background-fill-secondary); color: var(--body-text-color);
                    cursor: pointer; max-width: 100%; font: inherit; }
.step-cands .cand b { font-family: var(--font-mono); white-space: pre; overflow: hidden; text-overflow: ellipsis;
                      max-width: 12em; }
.step-cands .cand span { font-size: 0.85em; font-variant-numeric: tabular-nums; }
.step-cands .cand.chosen { border: 2px solid var(--color-accent); }
.step-cands .cand.cut span { color: #b91c1c; }
.step-cands .cand-outside { font-size: 0.8em; color: #b45309; }
.dark .step-cands .cand-outside { color: #fbbf24; }
.dark .step-cands .cand.cut span { color: #f87171; }
.step-cands .cand:hover, .step-cands .cand:focus-visible { border-color: var(--color-accent); }
.step-cut, .step-method { color: var(--body-text-color-subdued); margin-top: 3px; overflow-wrap: anywhere; }
.branches { list-style: none; padding: 0; margin: 0; }
.branches li { border-left: 3px solid var(--border-color-primary); padding: 2px 0 4px 6px; margin: 3px 0; }
.bmeta { color: var(--body-text-color-subdued); font-size: 0.9em; }
.btokens { display: flex; flex-wrap: wrap; gap: 1px; }
.bnode { font-family: var(--font-mono); white-space: pre; padding: 0 2px; border: 1px solid transparent;
         border-radius: 3px; background: none; color: var(--body-text-color); cursor: pointer; font-size: 0.95em; }
.bnode.on { background: var(--background-fill-secondary); }
.bnode.how-picked { border-color: #d97706; }
.bnode.how-typed { border-style: dashed; border-color: var(--body-text-color-subdued); }
.bnode.here { outline: 2px solid var(--color-accent); }
.bnode:hover, .bnode:focus-visible { border-color: var(--color-accent); }
.step-beams { margin: 2px 0 0 1.2em; padding: 0; }
.beam-score { font-variant-numeric: tabular-nums; color: var(--body-text-color-subdued); }
"""

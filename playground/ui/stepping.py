"""Step mode's handlers: Step / Step 8 / Run to the end advance every visible column, a candidate's click forks,
typed text is forced, a node of the branch tree is resumed. Refused, with the reason, while a run or another step
of the session is under way (that run goes on untouched)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground import runner
from playground.errors import PlaygroundError
from playground.events import DoneEvent, ProgressEvent
from playground.generation_slot import Holder
from playground.result import Result
from playground.spec import RunSpec
from playground.ui.chat import MODES
from playground.ui.events import Inputs, Updates, on_private, writes
from playground.ui.live import LIVE_RUNS
from playground.ui.page import Page
from playground.ui.reuse_view import page_scope
from playground.ui.step_runs import absorb, searches_beams, seeded_each_token, step_spec
from playground.ui.step_tree import StepTree
from playground.ui.step_view import branches_html, candidates_html, shown_candidates, shows_branch, strip_html

Steps = dict[str, Any]  # the page's step state: {"prompt": str, "trees": {slot: StepTree}}
TO_THE_END = 1 << 30  # "run to the end": as many tokens as the branch has left


def _views(page: Page, slot: int, tree: StepTree | None, colour_by: str, note: str = "") -> Updates:
    """A column's candidates, branch tree, output text and token view (the current branch, or the best beam)."""
    col = page.columns[slot]
    updates: Updates = {col.step_candidates: candidates_html(tree, note), col.branches: branches_html(tree)}
    beams = (tree.last.get("beams") or []) if tree is not None else []
    if beams:
        updates[col.output] = beams[0][0]
    elif tree is not None and tree.current is not None:  # at the prompt, the last run's text and tokens stay
        updates[col.output] = tree.text()
        updates[col.tokens] = strip_html(tree, colour_by)
    return updates


def _busy(request: gr.Request, undone: str = "not stepped") -> str | None:
    """The step line's refusal while a run of this page is under way (`undone`: what did not happen), or None."""
    doing = LIVE_RUNS.doing(request.session_hash or "")
    return None if doing is None else (f"⚠ **{undone}:** {doing} is under way; it goes on, and Step works once it "
                                       "ends (or after Stop)")


def _trees(steps: Steps, prompt: str, specs: dict[int, dict[str, Any]]) -> dict[int, StepTree]:
    """The trees that still hold: a changed prompt or a column's changed settings start that column afresh."""
    kept = steps.get("trees", {}) if steps.get("prompt") == prompt else {}
    return {slot: kept[slot] if slot in kept and kept[slot].spec == spec else StepTree(spec)
            for slot, spec in specs.items()}


def _column_specs(page: Page, data: Inputs) -> tuple[str, dict[int, dict[str, Any]]]:
    values = page.read(data)
    settings = values.settings()
    specs = {slot: RunSpec.from_dict({**column, "seed": settings["seed"], "chat": MODES[settings["mode"]]}).to_dict()
             for slot, column in zip(values.active, settings["columns"], strict=True)}
    return settings["prompt"], specs


def _run_step(prompt: str, spec: RunSpec, stop: Any, progress: gr.Progress, slot: int, session: str) -> Result:
    """One step's run. In the column's prefix-store scope, so a step restores the cache of the step before it (or
    of the node it forks from) and runs only the ids that cache does not hold: one decode step, not a prefill."""
    for event in runner.run(prompt, spec, should_stop=stop.is_set, judged=False,
                            holder=Holder("a Step", owner=session), scope=page_scope(session, slot)):
        if isinstance(event, ProgressEvent):
            progress(event.fraction, desc=f"column {slot + 1}: {event.message}")
        elif isinstance(event, DoneEvent):
            return event.result
    raise RuntimeError("the step ended without a result")


def _advance(tree: StepTree, prompt: str, count: int, stop: Any, progress: gr.Progress, slot: int,
             session: str = "") -> None:
    """Up to `count` tokens from the tree's current node: one run, or a sampling column's Step 8 as eight Steps
    (each token drawn as its own Step draws it). Refused (PlaygroundError) when not even the first can run."""
    runs, each = (count, 1) if count != TO_THE_END and seeded_each_token(tree.spec) else (1, count)
    for done in range(runs):
        spec = step_spec(tree, each)
        if isinstance(spec, str):
            if done:  # the branch filled up or its text ended: the tokens stepped so far stay
                return
            raise PlaygroundError(spec)
        asked = spec.max_new_tokens - (int(tree.last.get("depth", 0)) if searches_beams(tree.spec) else 0)
        absorb(tree, _run_step(prompt, spec, stop, progress, slot, session), asked)
        if stop.is_set():
            return


def step_columns(page: Page, data: Inputs, count: int, request: gr.Request,
                 progress: gr.Progress) -> Iterator[Updates]:
    """Every visible column advanced by up to `count` tokens from its current node, one column after another."""
    refused = _busy(request)
    if refused is not None:
        yield {page.step_status: refused}
        return
    if page.read(data).mode == "chat" and data[page.conversation]:
        yield {page.step_status: "⚠ **not stepped:** step mode continues one prompt; clear the conversation"}
        return
    try:
        prompt, specs = _column_specs(page, data)
        runner.check_prompt(prompt)
    except PlaygroundError as exc:
        yield {page.step_status: f"⚠ **not stepped:** {exc}"}
        return
    trees = _trees(data[page.steps], prompt, specs)
    colour_by = data[page.colour_by]
    stop = LIVE_RUNS.stop_flag(request.session_hash or "")
    stop.clear()
    notes: dict[int, str] = {}
    with LIVE_RUNS.working(request.session_hash or "", "a step"):
        for slot, tree in trees.items():
            yield {page.step_status: f"▶ stepping column {slot + 1}"}
            try:
                _advance(tree, prompt, count, stop, progress, slot, request.session_hash or "")
            except PlaygroundError as exc:
                notes[slot] = f"⚠ {exc}"
            yield _views(page, slot, tree, colour_by, notes.get(slot, ""))
    done = len(trees) - len(notes)
    yield {page.steps: {"prompt": prompt, "trees": trees},
           page.step_status: f"✓ stepped {done} of {len(trees)} column(s)"
           + (f"; {'; '.join(f'column {s + 1}: {n}' for s, n in notes.items())}" if notes else "")}


def pick(page: Page, steps: Steps, colour_by: str, slot: int, evt: gr.EventData, request: gr.Request) -> Updates:
    """A candidate's click: that token forced at the current position (a sibling of the current node)."""
    refused = _busy(request, "not forked")
    if refused is not None:
        return {page.step_status: refused}
    tree = steps.get("trees", {}).get(slot)
    token = getattr(evt, "token", None)
    if tree is None or tree.current is None or not isinstance(token, (int, float)):
        return {}
    record = tree.nodes[tree.current].record or {}
    alternative = next((a for a in shown_candidates(record) if a["id"] == int(token)), None)
    if alternative is None:
        return {}
    tree.fork(int(token), alternative["text"], alternative.get("logprob_model"))
    return _views(page, slot, tree, colour_by) | {page.steps: steps, page.step_status: (
        f"✓ column {slot + 1}: forced {alternative['text']!r} at token {len(tree.path()) - 1}; Step continues "
        "from it")}


def resume(page: Page, steps: Steps, colour_by: str, slot: int, evt: gr.EventData, request: gr.Request) -> Updates:
    """A node's click in the branch tree: the column stands there; Step continues from it."""
    refused = _busy(request, "not resumed")
    if refused is not None:
        return {page.step_status: refused}
    tree = steps.get("trees", {}).get(slot)
    node = getattr(evt, "node", None)
    if tree is None or not isinstance(node, (int, float)) or not 0 <= int(node) < len(tree.nodes):
        return {}
    tree.resume(int(node))
    return _views(page, slot, tree, colour_by) | {page.steps: steps, page.step_status: (
        f"✓ column {slot + 1}: resumed at token {len(tree.path()) - 1}")}


def force_text(page: Page, data: Inputs, request: gr.Request) -> Updates:
    """The typed text's tokens forced after each column's current node (each column's own tokenizer)."""
    text = str(data[page.step_text] or "")
    refused = _busy(request, "not forced")
    if refused is not None:
        return {page.step_status: refused}
    if not text:
        return {page.step_status: "⚠ **not forced:** type the text to force first"}
    try:
        prompt, specs = _column_specs(page, data)
    except PlaygroundError as exc:
        return {page.step_status: f"⚠ **not forced:** {exc}"}
    trees = _trees(data[page.steps], prompt, specs)
    colour_by = data[page.colour_by]
    updates: Updates = {}
    forced = 0
    for slot, tree in trees.items():
        if searches_beams(tree.spec):
            updates |= _views(page, slot, tree, colour_by,
                              "beam search keeps several hypotheses: typed text is not forced here")
            continue
        try:
            pieces = runner.encode_text(RunSpec.from_dict(tree.spec), text)
        except PlaygroundError as exc:
            updates |= _views(page, slot, tree, colour_by, f"⚠ {exc}")
            continue
        for token, piece in pieces:
            tree.add(token, piece, "typed", None)
        forced += 1
        updates |= _views(page, slot, tree, colour_by)
    return updates | {page.steps: {"prompt": prompt, "trees": trees}, page.step_text: "",
                      page.step_status: f"✓ forced {text!r} in {forced} column(s); Step continues after it"}


def recolour_branches(page: Page, steps: Steps, colour_by: str, views: list[str | None]) -> Updates:
    """The colour toggle on columns whose token view shows a step branch: the branch's tokens recoloured (the
    run's would replace the branch the person stands on)."""
    trees = (steps or {}).get("trees", {})
    return {page.columns[slot].tokens: strip_html(trees[slot], colour_by) for slot, view in enumerate(views)
            if shows_branch(view) and slot in trees and trees[slot].current is not None}


def wire_steps(page: Page) -> None:
    """Step, Step 8 and Run to the end in the queue (they run the model); clicks on candidates and nodes outside
    it (they only move through the tree)."""
    inputs = page.setting_inputs() | {page.steps, page.conversation}
    views = [x for col in page.columns for x in (col.step_candidates, col.branches, col.output, col.tokens)]
    for button, count in ((page.step, 1), (page.step_8, 8), (page.run_to_end, TO_THE_END)):
        @writes(views, page.steps, page.step_status)
        def advance(data: Inputs, request: gr.Request, progress: gr.Progress = gr.Progress(),  # noqa: B008
                    count: int = count) -> Iterator[Updates]:
            yield from step_columns(page, data, count, request, progress)

        on_private(button.click, advance, inputs, queue=True, show_progress_on=[page.step_status])

    @writes(views, page.steps, page.step_status, page.step_text)
    def typed(data: Inputs, request: gr.Request) -> Updates:
        return force_text(page, data, request)

    on_private(page.force_text.click, typed, inputs | {page.step_text}, queue=True, show_progress_on=[page.step_status])
    for slot, col in enumerate(page.columns):
        shown = (col.step_candidates, col.branches, col.output, col.tokens)

        @writes(*shown, page.steps, page.step_status)
        def on_candidate(steps: Steps, colour_by: str, evt: gr.EventData, request: gr.Request,
                         slot: int = slot) -> Updates:
            return pick(page, steps, colour_by, slot, evt, request)

        @writes(*shown, page.steps, page.step_status)
        def on_node(steps: Steps, colour_by: str, evt: gr.EventData, request: gr.Request, slot: int = slot) -> Updates:
            return resume(page, steps, colour_by, slot, evt, request)

        on_private(col.step_candidates.click, on_candidate, [page.steps, page.colour_by])
        on_private(col.branches.click, on_node, [page.steps, page.colour_by])

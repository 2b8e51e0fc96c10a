"""The page's behaviour: layout, settings and run events wired to the components, the `run` API, build_ui().

The page talks to model code only through `runner` (it never imports torch or jax), so it starts in seconds
and models load on the first run, with progress.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import closing
from functools import partial
from typing import Any

import gradio as gr
from gradio.events import Dependency

from playground import runner
from playground.errors import PlaygroundError
from playground.events import DoneEvent
from playground.result import Result
from playground.spec import RunSpec
from playground.ui import branch, context_running, context_tab, lab_tab, stepping, sweep_tab, sweep_wiring, warmup
from playground.ui.branch import cut_outputs
from playground.ui.cache_view import wire_strip
from playground.ui.cold_ttft import wire_cold_ttft
from playground.ui.columns import column_settings, notice_text, wire
from playground.ui.events import Handler, Inputs, Updates, on_private, writes
from playground.ui.export import (
    EXPORT_MAX_AGE_S,
    decode_url_state,
    encode_url_state,
    page_settings,
    parse_settings,
    settings_from_json,
    settings_to_json,
    write_exports,
)
from playground.ui.outcome import Outcome, finished, renumbered
from playground.ui.page import Page, build_page
from playground.ui.plots import drawn_series, step_axes
from playground.ui.presets import PRESETS
from playground.ui.run import forget_session, recolour, render, render_outputs, run_all, run_outputs, stop_flag
from playground.ui.style import CLAMP_NOTE_JS, SHORTCUT_JS, WRITE_URL_JS
from playground.ui.sweep_api import api_sweep

HEARTBEAT_S = 0.25  # how often the run API yields while generating: the most a vanished client runs on


def remove_column(page: Page, flags: list[bool], outcome: Outcome, colour_by: str, slot: int) -> Updates:
    """The column leaves the page, and its results leave the table, the plots and the divergence note; its card
    is emptied, so a column added there later starts blank rather than showing the removed column's text."""
    col = page.columns[slot]
    emptied: Updates = {col.output: "", col.chatbot: [], col.tokens: "", col.notice: ""}
    return relayout(page, [f and j != slot for j, f in enumerate(flags)], outcome, colour_by) | emptied


def add_column(page: Page, flags: list[bool], outcome: Outcome, colour_by: str) -> Updates:
    """A column in the first free slot; if that slot comes before others, those are renumbered (and recoloured)."""
    flags = list(flags)
    if False in flags:
        flags[flags.index(False)] = True
    return relayout(page, flags, outcome, colour_by)


def relayout(page: Page, flags: list[bool], outcome: Outcome, colour_by: str) -> Updates:
    """The cards shown by `flags`, numbered by position, with the results redrawn under the same numbers."""
    current = renumbered(outcome, flags)
    return page.layout(flags) | {page.results: current} | render(page, current, colour_by)


def relayout_outputs(page: Page) -> list[Any]:
    """What `relayout` (so add_column, and remove_column but for the emptied card) sets."""
    return [*page.layout_outputs(), page.results, *render_outputs(page)]


def apply_preset(page: Page, name: str, data: Inputs) -> Updates:
    """The preset's prompt, format and columns on the page; the seed and the repeat count stay the user's."""
    preset = PRESETS[name]
    current = page.read(data)
    try:
        settings = parse_settings(page_settings(preset.prompt, current.seed, preset.mode, list(preset.columns),
                                                current.repeats))
    except PlaygroundError as exc:  # a seed or repeat count the page let through but settings refuse
        return {page.status: f"⚠ **{name} not applied:** {exc}"}
    note = f"**{name}:** {preset.note}"
    return page.apply_settings(settings, note) | {page.preset_note: f"**What to look for** ({name}): {preset.note}"}


def clicked_position(evt: gr.EventData) -> Any:
    """The position a token view's click reported (see cut.PICK_TOKEN_JS): EventData exposes the payload that
    the page's script sent as attributes."""
    try:
        return getattr(evt, "position", None)
    except TypeError:  # an event that carried no payload at all
        return None


def _write_url(page: Page, dependency: Dependency) -> Dependency:
    """Then the page address takes the settings token (a browser-only step: no server round trip)."""
    return dependency.then(None, page.url_token, None, js=WRITE_URL_JS)


def _wire_layout(page: Page, show_chat: Handler) -> None:
    """Adding and removing columns, the prompt format, the conversation and the token colours."""
    notices = [col.notice for col in page.columns]
    inputs = [page.visible, page.results, page.colour_by, *notices]

    def labelled(updates: Updates, shown: list[str]) -> Updates:
        """The Run button follows the columns now shown (set here: a private event's updates fire no .change)."""
        flags = updates[page.visible]
        return updates | {page.run: page.run_label(flags, *(updates.get(n, s) for n, s in zip(notices, shown,
                                                                                               strict=True)))}

    @writes(page.chat_outputs(), page.latency_plot, page.kv_plot)
    def settle(mode: str, outcome: Outcome) -> Updates:
        """After the cards changed: chat mode's output boxes hidden again (see Page.chat_outputs), and the step
        plots' legends naming the columns that still have results. A step of its own, as a legend that changes
        in the same update as the plot's data can drop that data (ui.plots.step_axes)."""
        legend = gr.update(colors_in_legend=drawn_series(outcome["results"], outcome["positions"]))
        return page.chat_visibility(mode) | {page.latency_plot: legend, page.kv_plot: legend}

    @writes(relayout_outputs(page), page.run)
    def add(flags: list[bool], outcome: Outcome, colour_by: str, *shown: str) -> Updates:
        return labelled(add_column(page, flags, outcome, colour_by), list(shown))

    on_private(on_private(page.add.click, add, inputs).then, settle, [page.mode, page.results])
    for i, col in enumerate(page.columns):
        @writes(relayout_outputs(page), [x for c in page.columns for x in (c.chatbot, c.notice)], page.run)
        def remove(flags: list[bool], outcome: Outcome, colour_by: str, *shown: str, i: int = i) -> Updates:
            return labelled(remove_column(page, flags, outcome, colour_by, i), list(shown))

        on_private(on_private(col.remove.click, remove, inputs).then, settle, [page.mode, page.results])
        wire(col)
        wire_strip(i, col.cache_step, col.cache_strip, page.results)
    on_private(page.mode.input, show_chat, page.mode)

    @writes(page.conversation, [c.chatbot for c in page.columns], [c.cold.note for c in page.columns])
    def clear_conversation() -> Updates:
        return {page.conversation: []} | {c.chatbot: [] for c in page.columns} | {c.cold.note: "" for c in page.columns}

    @writes(page.legend, [c.tokens for c in page.columns])
    def recolour_tokens(outcome: Outcome, colour_by: str, steps: stepping.Steps, *views: str | None) -> Updates:
        return recolour(page, outcome, colour_by) | stepping.recolour_branches(page, steps, colour_by, list(views))

    on_private(page.clear_chat.click, clear_conversation)
    wire_cold_ttft([c.cold for c in page.columns], page.conversation, page.results)
    on_private(page.colour_by.input, recolour_tokens,
               [page.results, page.colour_by, page.steps, *(c.tokens for c in page.columns)])


def _wire_settings(page: Page, show_chat: Handler) -> Handler:
    """Presets, the settings JSON and the address bar: all routes to the same validated page settings.

    Returns the handler that restores settings from the page address, for demo.load.
    """
    @writes(page.apply_outputs())
    def apply_json(text: str) -> Updates:
        try:
            return page.apply_settings(settings_from_json(text), "✓ Settings applied.")
        except PlaygroundError as exc:
            return {page.status: f"⚠ **settings not applied:** {exc}"}

    @writes(page.apply_outputs())
    def restore(request: gr.Request) -> Updates:
        token = request.query_params.get("s") if request else None
        if not token:
            return {page.status: gr.skip()}  # an empty dict would read as one value for every output
        try:
            return page.apply_settings(decode_url_state(token), "✓ Settings restored from the link.")
        except PlaygroundError as exc:
            return {page.status: f"⚠ **the link's settings were not applied:** {exc}"}

    for name, button in page.presets.items():
        @writes(page.apply_outputs())
        def preset(data: Inputs, name: str = name) -> Updates:
            return apply_preset(page, name, data)

        on_private(_write_url(page, on_private(button.click, preset, page.setting_inputs())).then, show_chat,
                   page.mode)
    on_private(_write_url(page, on_private(page.apply.click, apply_json, page.settings_json)).then, show_chat,
               page.mode)
    return restore


STOPPING = ("■ Stopping after the current token (a column loading a model stops once the load ends; a JAX compile "
            "finishes in the background)…")


def _wire_run(page: Page) -> None:
    """Run (and the prompt's Enter): snapshot the settings, lock the controls, run the columns in the queue,
    unlock, offer the exports. The address follows every settings change; Stop works outside the queue."""
    inputs = page.setting_inputs() | {page.conversation}

    @writes(page.settings_json, page.url_token)
    def snapshot(data: Inputs) -> Updates:
        """The settings this run uses, into the JSON box and (by the next step's JS) the page address."""
        settings = page.read(data).settings()
        return {page.settings_json: settings_to_json(settings), page.url_token: encode_url_state(settings)}

    @writes(snapshot.outputs, page.latency_plot, page.kv_plot)
    def before_run(data: Inputs) -> Updates:
        """The snapshot, and the step plots' legend and range for the columns about to run."""
        columns = page.read(data).settings()["columns"]
        axes = step_axes(len(columns), [int(c["max_new_tokens"]) for c in columns])
        return snapshot.fn(data) | {page.latency_plot: gr.update(**axes), page.kv_plot: gr.update(**axes)}

    @writes(run_outputs(page))
    def run_columns(data: Inputs, request: gr.Request,
                    progress: gr.Progress = gr.Progress()) -> Iterator[Updates]:  # noqa: B008 - Gradio idiom
        yield from run_all(page, data, request, progress)

    for trigger in (page.run.click, page.prompt.submit):
        ready = _write_url(page, on_private(trigger, before_run, page.setting_inputs()))
        _run_steps(page, on_private(ready.then, _reset_cut(page)).then, run_columns, inputs)
    _wire_branch(page)
    # the address always carries the current settings, so a copied link restores what is on the page (`change`:
    # `input` misses a pasted, dropped or autofilled value)
    changes = [knob.change for col in page.columns for knob in col.knobs.values()]
    changes += [page.seed.input, page.repeats.input, page.mode.input, page.prompt.blur]
    _write_url(page, on_private(partial(gr.on, changes), snapshot, page.setting_inputs()))

    @writes(page.run)
    def run_label(flags: list[bool], *notices: str) -> Updates:
        return {page.run: page.run_label(flags, *notices)}

    on_private(partial(gr.on, [col.notice.change for col in page.columns] + [page.visible.change]), run_label,
               [page.visible, *(col.notice for col in page.columns)])

    _wire_recheck(page)

    @writes(page.status)
    def request_stop(request: gr.Request) -> Updates:
        stop_flag(request).set()
        return {page.status: STOPPING}

    on_private(page.stop.click, request_stop)  # outside the queue, so it is not stuck behind the run it stops


def _wire_recheck(page: Page) -> None:
    """What the last run refused is checked again as the prompt changes."""
    notices = [col.notice for col in page.columns]

    @writes(notices, page.run, page.status)
    def recheck(data: Inputs) -> Updates:
        """A refusal left by the last run (an empty prompt) is checked again as the prompt changes (typed, pasted
        or restored: `change`, not `input`), so it never outlives its cause; the Run button's count follows, and
        the status line's summary of refusals goes once none is left."""
        updates: Updates = {}
        for col in page.columns:
            if str(data[col.notice]).startswith("⚠"):
                updates[col.notice] = notice_text(column_settings(col.read(data)))
        now = [str(updates[col.notice] if col.notice in updates else data[col.notice]) for col in page.columns]
        refused = any(notice.startswith("⚠") for notice in now)
        status = str(data[page.status] or "")
        cleared = {page.status: ""} if updates and not refused and status.startswith("⚠") else {}
        return updates | cleared | {page.run: page.run_label(data[page.visible], *now)}

    on_private(page.prompt.change, recheck, page.setting_inputs() | set(notices) | {page.status},
               trigger_mode="always_last")


def _wire_branch(page: Page) -> None:
    """A token's click opens its sampling cut (outside the queue); "continue from here" runs every column again
    from that token with the chosen alternative forced, as a run does (settings locked, exports after)."""
    for i, col in enumerate(page.columns):
        @writes(cut_outputs(page))
        def on_pick(outcome: Outcome, evt: gr.EventData, i: int = i) -> Updates:
            return branch.pick(page, outcome, i, clicked_position(evt))

        on_private(col.tokens.click, on_pick, page.results).then(
            None, None, None, js="() => document.getElementById('sampling-cut')?.scrollIntoView("
                                 "{block: 'nearest', behavior: 'smooth'})")

    @writes(run_outputs(page))
    def branch_columns(outcome: Outcome, picked: branch.Picked | None, token: Any, colour_by: str,
                       request: gr.Request, progress: gr.Progress = gr.Progress()  # noqa: B008 - Gradio idiom
                       ) -> Iterator[Updates]:
        yield from branch.branch_all(page, outcome, picked, token, colour_by, request, progress)

    _run_steps(page, page.branch.click, branch_columns,
               [page.results, page.picked, page.branch_choice, page.colour_by], _reset_cut(page))


def _reset_cut(page: Page) -> Handler:
    return Handler(lambda: branch.reset(page), tuple(cut_outputs(page)))


def _run_steps(page: Page, start: Callable[..., Dependency], columns: Handler, inputs: Any,
               *after_unlock: Handler) -> None:
    """From `start` (a listener or a dependency's `.then`): every control locked, `columns` run in the queue
    (progress on the status line), controls unlocked, `after_unlock` steps, the exports of what finished."""
    lockable = page.lockable()

    @writes(lockable, page.stop)
    def lock() -> Updates:
        """Settings cannot change under a running column: every control is locked until the run ends. Stop
        turns red while there is something to stop."""
        return {component: gr.update(interactive=False) for component in lockable} | {
            page.stop: gr.update(variant="stop")}

    @writes(lockable, page.stop)
    def unlock() -> Updates:
        return {component: gr.update(interactive=True) for component in lockable} | {
            page.stop: gr.update(variant="secondary")}

    downloads = (page.download_json, page.download_csv, page.download_logprobs_json, page.download_logprobs_csv)

    @writes(*downloads)
    def exports(outcome: Outcome) -> Updates:
        results, labels = finished(outcome)
        if not results or outcome["settings"] is None:
            return {button: gr.update(interactive=False) for button in downloads}
        written = write_exports(outcome["settings"], results, labels)
        return {button: gr.update(value=str(path), interactive=True)
                for button, path in zip(downloads, written, strict=True)}

    step = on_private(on_private(start, lock).then, columns, inputs, queue=True, show_progress_on=[page.status])
    for handler in (unlock, *after_unlock):
        step = on_private(step.then, handler)
    on_private(step.then, exports, page.results)
def api_run(prompt: str, spec: str) -> Iterator[Result | None]:
    """Run one generation; `spec` is a JSON object of RunSpec keys (missing keys take defaults).

    Streams null at most every HEARTBEAT_S while it generates and the Result last (gradio_client's predict
    returns the last). Each yield is where Gradio notices a client that went away: it then closes this
    generator, which closes the runner's event stream and so stops the generation at its next step.
    """
    try:
        with closing(runner.run(prompt, RunSpec.from_json(spec))) as events:
            last = time.monotonic()
            for event in events:
                if isinstance(event, DoneEvent):
                    yield event.result
                    return
                if time.monotonic() - last >= HEARTBEAT_S:
                    last = time.monotonic()
                    yield None
    except PlaygroundError as exc:
        raise gr.Error(str(exc)) from None


def build_ui() -> tuple[gr.Blocks, Page]:
    """The whole page, and its components (for tests and scripts that drive handlers directly); app.py queues
    the Blocks (one generation at a time) and launches it with CSS and THEME."""
    # Gradio's copies of served files (the exports) are deleted hourly once an hour old, as are our own folders
    with gr.Blocks(title="Decoding Playground", fill_width=True,
                   delete_cache=(EXPORT_MAX_AGE_S, EXPORT_MAX_AGE_S)) as demo:
        notice, poll = warmup.banner()  # above the page: shown only while a warm-up runs
        with gr.Tabs(elem_id="tabs"):
            with gr.Tab("Compare settings", id="compare", elem_id="compare-tab"):
                page = build_page()
            with gr.Tab("Sweep a knob", id="sweep", elem_id="sweep-tab"):
                sweep = sweep_tab.build_sweep_tab()
            with gr.Tab("Sampler lab", id="lab", elem_id="lab-tab"):
                lab = lab_tab.build_lab_tab()
            with gr.Tab("Long context", id="context", elem_id="context-tab"):
                context = context_tab.build_context_tab()
        show_chat = Handler(page.chat_visibility, tuple(page.chat_outputs()))
        _wire_layout(page, show_chat)
        restore = _wire_settings(page, show_chat)
        _wire_run(page)
        stepping.wire_steps(page)
        sweep_wiring.wire(sweep)
        lab_tab.wire(lab)
        context_running.wire(context)
        on_private(on_private(demo.load, restore).then, show_chat, page.mode)
        demo.load(None, None, None, js=SHORTCUT_JS)  # Ctrl/Cmd+Enter in the prompt presses Run
        demo.load(None, None, None, js=CLAMP_NOTE_JS)  # out-of-range numbers say what they became
        demo.unload(forget_session)
        gr.api(api_run, api_name="run")
        gr.api(api_sweep, api_name="sweep")
        gr.api(lab_tab.api_chain, api_name="chain")
        warmup.wire(demo, notice, poll)
    return demo, page


__all__ = ["Page", "api_run", "apply_preset", "build_ui"]

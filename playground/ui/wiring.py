"""The page's behaviour: layout, settings and run events wired to the components, the `run` API, build_ui().

The page talks to model code only through `runner` (it never imports torch or jax), so it starts in seconds
and models load on the first run, with progress.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import gradio as gr

from playground import runner
from playground.errors import PlaygroundError
from playground.events import DoneEvent
from playground.result import Result
from playground.spec import RunSpec
from playground.ui import branch, warmup
from playground.ui.cache_view import wire_strip
from playground.ui.columns import wire
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
from playground.ui.run import forget_session, read_settings, recolour, render, run_all, stop_flag
from playground.ui.style import SHORTCUT_JS, WRITE_URL_JS

HEARTBEAT_S = 0.25  # how often the run API yields while generating: the most a vanished client runs on


def remove_column(page: Page, flags: list[bool], outcome: Outcome, colour_by: str, slot: int) -> dict[Any, Any]:
    """The column leaves the page, and its results leave the table, the plots and the divergence note; its card
    is emptied, so a column added there later starts blank rather than showing the removed column's text."""
    col = page.columns[slot]
    emptied = {col.output: "", col.chatbot: [], col.tokens: "", col.notice: ""}
    return relayout(page, [f and j != slot for j, f in enumerate(flags)], outcome, colour_by) | emptied


def add_column(page: Page, flags: list[bool], outcome: Outcome, colour_by: str) -> dict[Any, Any]:
    """A column in the first free slot; if that slot comes before others, those are renumbered (and recoloured)."""
    flags = list(flags)
    if False in flags:
        flags[flags.index(False)] = True
    return relayout(page, flags, outcome, colour_by)


def relayout(page: Page, flags: list[bool], outcome: Outcome, colour_by: str) -> dict[Any, Any]:
    """The cards shown by `flags`, numbered by position, with the results redrawn under the same numbers."""
    current = renumbered(outcome, flags)
    return page.layout(flags) | {page.results: current} | render(page, current, colour_by)


def apply_preset(page: Page, name: str, data: dict[Any, Any]) -> dict[Any, Any]:
    """The preset's prompt, format and columns on the page; the seed and the repeat count stay the user's."""
    preset = PRESETS[name]
    current, _ = read_settings(page, data)
    try:
        settings = parse_settings(page_settings(preset.prompt, current["seed"], preset.mode, list(preset.columns),
                                                current["repeats"]))
    except PlaygroundError as exc:  # a seed or repeat count the page let through but settings refuse
        return {page.status: f"⚠ **{name} not applied:** {exc}"}
    return page.apply_settings(settings, f"**{name}:** {preset.note}")


def _wire_layout(page: Page) -> None:
    """Layout events stay outside the queue, so a long generation never delays someone's clicks."""
    layout_outputs: list[Any] = [page.visible, page.add] + [x for c in page.columns
                                                            for x in (c.settings_box, c.output_box, c.remove,
                                                                      c.title, c.output)]

    rendered = [page.results, page.metrics, page.process_memory, page.speed_plot, page.latency_plot, page.kv_plot,
                page.diff, page.legend] + [x for c in page.columns
                                                   for x in (c.tokens, c.beam_tree, c.cache_step, c.cache_strip)]
    settled = [*page.chat_outputs(), page.latency_plot, page.kv_plot]

    def settle(mode: str, outcome: Outcome) -> dict[Any, Any]:
        """After the cards changed: chat mode's output boxes hidden again (see Page.chat_outputs), and the step
        plots' legends naming the columns that still have results. A step of its own, as a legend that changes
        in the same update as the plot's data can drop that data (ui.plots.step_axes)."""
        legend = gr.update(colors_in_legend=drawn_series(outcome["results"], outcome["positions"]))
        return page.chat_visibility(mode) | {page.latency_plot: legend, page.kv_plot: legend}

    page.add.click(lambda flags, outcome, by: add_column(page, flags, outcome, by),
                   [page.visible, page.results, page.colour_by], layout_outputs + rendered, queue=False,
                   api_visibility="private").then(settle, [page.mode, page.results], settled, queue=False,
                                                  api_visibility="private")

    for i, col in enumerate(page.columns):
        col.remove.click(lambda flags, outcome, by, i=i: remove_column(page, flags, outcome, by, i),
                         [page.visible, page.results, page.colour_by],
                         layout_outputs + rendered + [x for c in page.columns for x in (c.chatbot, c.notice)],
                         queue=False,
                         api_visibility="private").then(settle, [page.mode, page.results], settled, queue=False,
                                                        api_visibility="private")
        wire(col)
        wire_strip(i, col.cache_step, col.cache_strip, page.results)
    page.mode.input(page.chat_visibility, page.mode, page.chat_outputs(), queue=False, api_visibility="private")

    def clear_conversation() -> dict[Any, Any]:
        return {page.conversation: []} | {c.chatbot: [] for c in page.columns}

    page.clear_chat.click(clear_conversation, None, [page.conversation] + [c.chatbot for c in page.columns],
                          queue=False, api_visibility="private")
    page.colour_by.input(lambda outcome, by: recolour(page, outcome, by), [page.results, page.colour_by],
                         [page.legend] + [c.tokens for c in page.columns], queue=False, api_visibility="private")


def _wire_settings(page: Page) -> Any:
    """Presets, the settings JSON and the address bar: all routes to the same validated page settings.

    Returns the handler that restores settings from the page address, for demo.load.
    """
    outputs = page.apply_outputs()

    def apply_json(text: str) -> dict[Any, Any]:
        try:
            return page.apply_settings(settings_from_json(text), "✓ Settings applied.")
        except PlaygroundError as exc:
            return {page.status: f"⚠ **settings not applied:** {exc}"}

    def restore(request: gr.Request) -> dict[Any, Any]:
        token = request.query_params.get("s") if request else None
        if not token:
            return {page.status: gr.skip()}  # an empty dict would read as one value for every output
        try:
            return page.apply_settings(decode_url_state(token), "✓ Settings restored from the link.")
        except PlaygroundError as exc:
            return {page.status: f"⚠ **the link's settings were not applied:** {exc}"}

    for name, button in page.presets.items():
        button.click(lambda data, name=name: apply_preset(page, name, data), page.setting_inputs(), outputs,
                     queue=False, api_visibility="private").then(None, page.url_token, None, js=WRITE_URL_JS).then(
            page.chat_visibility, page.mode, page.chat_outputs(), queue=False, api_visibility="private")
    page.apply.click(apply_json, page.settings_json, outputs, queue=False, api_visibility="private").then(
        None, page.url_token, None, js=WRITE_URL_JS).then(
        page.chat_visibility, page.mode, page.chat_outputs(), queue=False, api_visibility="private")
    return restore


def _wire_run(page: Page) -> None:
    inputs = page.setting_inputs() | {page.conversation, page.colour_by}
    outputs = [page.status, page.results, page.metrics, page.process_memory, page.speed_plot, page.latency_plot,
               page.kv_plot, page.diff, page.legend, page.conversation, page.prompt]
    for col in page.columns:
        outputs += [col.output, col.notice, col.tokens, col.chatbot, col.beam_tree, col.cache_step, col.cache_strip]

    def snapshot(data: dict[Any, Any]) -> dict[Any, Any]:
        """The settings this run uses, into the JSON box and (by the next step's JS) the page address."""
        settings, _ = read_settings(page, data)
        return {page.settings_json: settings_to_json(settings), page.url_token: encode_url_state(settings)}

    def before_run(data: dict[Any, Any]) -> dict[Any, Any]:
        """The snapshot, and the step plots' legend and range for the columns about to run."""
        settings, active = read_settings(page, data)
        axes = step_axes(len(active), [int(c["max_new_tokens"]) for c in settings["columns"]])
        return snapshot(data) | {page.latency_plot: gr.update(**axes), page.kv_plot: gr.update(**axes)}

    def run_columns(data: dict[Any, Any], request: gr.Request,
                    progress: gr.Progress = gr.Progress()) -> Iterator[dict[Any, Any]]:  # noqa: B008 - Gradio idiom
        yield from run_all(page, data, request, progress)

    def exports(outcome: Outcome) -> dict[Any, Any]:
        results, labels = finished(outcome)
        if not results or outcome["settings"] is None:
            return {page.download_json: gr.update(interactive=False), page.download_csv: gr.update(interactive=False)}
        json_path, csv_path = write_exports(outcome["settings"], results, labels)
        return {page.download_json: gr.update(value=str(json_path), interactive=True),
                page.download_csv: gr.update(value=str(csv_path), interactive=True)}

    lockable = page.lockable()

    def locked(flag: bool) -> dict[Any, Any]:
        """Settings cannot change under a running column: every control is locked until the run ends."""
        return {component: gr.update(interactive=not flag) for component in lockable}

    for trigger in (page.run.click, page.prompt.submit):
        trigger(before_run, page.setting_inputs(), [page.settings_json, page.url_token, page.latency_plot,
                                                    page.kv_plot], queue=False, api_visibility="private").then(
            None, page.url_token, None, js=WRITE_URL_JS).then(
            lambda: branch.reset(page), None, _cut_outputs(page), queue=False, api_visibility="private").then(
            lambda: locked(True), None, lockable, queue=False, api_visibility="private").then(
            run_columns, inputs, outputs, api_visibility="private", show_progress_on=[page.status]).then(
            lambda: locked(False), None, lockable, queue=False, api_visibility="private").then(
            exports, page.results, [page.download_json, page.download_csv], queue=False, api_visibility="private")
    _wire_branch(page, outputs, locked, exports)
    # the address always carries the current settings, so a copied link restores what is on the page
    changes = [knob.input for col in page.columns for knob in col.knobs.values()]
    changes += [page.seed.input, page.repeats.input, page.mode.input, page.prompt.blur]
    gr.on(changes, snapshot, page.setting_inputs(), [page.settings_json, page.url_token], queue=False,
          api_visibility="private").then(None, page.url_token, None, js=WRITE_URL_JS)
    gr.on([col.notice.change for col in page.columns] + [page.visible.change], page.run_label,
          [page.visible, *(col.notice for col in page.columns)], page.run, queue=False, api_visibility="private")

    def request_stop(request: gr.Request) -> str:
        stop_flag(request).set()
        return "■ Stopping after the current token…"

    # outside the queue, so it is not stuck behind the run it is meant to stop
    page.stop.click(request_stop, None, page.status, queue=False, api_visibility="private")


def _cut_outputs(page: Page) -> list[Any]:
    return [page.cut, page.branch_choice, page.branch, page.picked]


def _clicked_position(evt: gr.EventData) -> Any:
    """The token position a token view's click reports (cut.py's trigger); EventData exposes the event's fields
    as attributes, and a click without a payload has none."""
    try:
        return evt.position
    except (AttributeError, TypeError):  # TypeError: no payload at all (EventData looks the name up in None)
        return None


def _wire_branch(page: Page, outputs: list[Any], locked: Any, exports: Any) -> None:
    """A token's click opens its sampling cut (outside the queue); "continue from here" runs every column again
    from that token with the chosen alternative forced, as a run does (settings locked, exports after)."""
    for i, col in enumerate(page.columns):
        def on_pick(outcome: Outcome, evt: gr.EventData, i: int = i) -> dict[Any, Any]:
            return branch.pick(page, outcome, i, _clicked_position(evt))

        col.tokens.click(on_pick, page.results, _cut_outputs(page), queue=False, api_visibility="private").then(
            None, None, None, js="() => document.getElementById('sampling-cut')?.scrollIntoView("
                                 "{block: 'nearest', behavior: 'smooth'})")

    def branch_columns(outcome: Outcome, picked: branch.Picked | None, token: Any, colour_by: str,
                       request: gr.Request, progress: gr.Progress = gr.Progress()  # noqa: B008 - Gradio idiom
                       ) -> Iterator[dict[Any, Any]]:
        yield from branch.branch_all(page, outcome, picked, token, colour_by, request, progress)

    page.branch.click(lambda: locked(True), None, page.lockable(), queue=False, api_visibility="private").then(
        branch_columns, [page.results, page.picked, page.branch_choice, page.colour_by], outputs,
        api_visibility="private", show_progress_on=[page.status]).then(
        lambda: locked(False), None, page.lockable(), queue=False, api_visibility="private").then(
        lambda: branch.reset(page), None, _cut_outputs(page), queue=False, api_visibility="private").then(
        exports, page.results, [page.download_json, page.download_csv], queue=False, api_visibility="private")


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


def build_ui() -> gr.Blocks:
    """The whole page; app.py queues it (one generation at a time) and launches it with CSS and THEME."""
    # Gradio's copies of served files (the exports) are deleted hourly once an hour old, as are our own folders
    with gr.Blocks(title="Decoding Playground", fill_width=True,
                   delete_cache=(EXPORT_MAX_AGE_S, EXPORT_MAX_AGE_S)) as demo:
        notice, poll = warmup.banner()  # above the page: shown only while a warm-up runs
        page = build_page()
        _wire_layout(page)
        restore = _wire_settings(page)
        _wire_run(page)
        demo.load(restore, None, page.apply_outputs(), queue=False, api_visibility="private").then(
            page.chat_visibility, page.mode, page.chat_outputs(), queue=False, api_visibility="private")
        demo.load(None, None, None, js=SHORTCUT_JS)  # Ctrl/Cmd+Enter in the prompt presses Run
        demo.unload(forget_session)
        gr.api(api_run, api_name="run")
        warmup.wire(demo, notice, poll)
    demo.page = page  # for tests and scripts that drive handlers directly
    return demo


__all__ = ["Page", "api_run", "apply_preset", "build_ui"]

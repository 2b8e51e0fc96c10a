"""Gradio Blocks page: a prompt, up to four run columns side by side, metrics, plots, token views; and the `run` API.

The page talks to model code only through `runner` (it never imports torch or jax), so it starts in seconds
and models load on the first run, with progress.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground import compatibility, runner
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from playground.ui.chat import MODE_LABELS
from playground.ui.columns import (
    MAX_COLUMNS,
    START_COLUMNS,
    ColumnControls,
    build_output,
    build_settings,
    wire,
)
from playground.ui.export import (
    decode_url_state,
    encode_url_state,
    page_settings,
    parse_settings,
    settings_from_json,
    settings_to_json,
    write_exports,
)
from playground.ui.metrics import empty_metrics, kv_frame, latency_frame, slot_colours, throughput_frame
from playground.ui.presets import PRESETS
from playground.ui.run import empty_outcome, forget_session, read_settings, recolour, run_all, stop_flag
from playground.ui.style import WRITE_URL_JS
from playground.ui.tokens import COLOUR_MODES, legend_html

DEFAULT_PROMPT = "What is the capital of France?"


@dataclass
class Page:
    """Every component the handlers read or write; build_ui() fills it, handlers key their updates by it."""

    prompt: gr.Textbox
    seed: gr.Number
    mode: gr.Radio
    run: gr.Button
    stop: gr.Button
    add: gr.Button
    clear_chat: gr.Button
    status: gr.Markdown
    visible: gr.State
    conversation: gr.State
    results: gr.State
    columns: list[ColumnControls]
    colour_by: gr.Radio
    legend: gr.HTML
    diff: gr.Markdown
    metrics: gr.Dataframe
    speed_plot: gr.BarPlot
    latency_plot: gr.LinePlot
    kv_plot: gr.LinePlot
    settings_json: gr.Code
    url_token: gr.Textbox
    apply: gr.Button
    presets: dict[str, gr.Button]
    download_json: gr.DownloadButton
    download_csv: gr.DownloadButton

    def layout(self, flags: list[bool]) -> dict[Any, Any]:
        """Show the columns whose flag is set; the last column cannot be removed, a fifth cannot be added."""
        updates: dict[Any, Any] = {self.visible: list(flags), self.add: gr.update(interactive=not all(flags))}
        for flag, col in zip(flags, self.columns, strict=True):
            updates[col.settings_box] = gr.update(visible=flag)
            updates[col.output_box] = gr.update(visible=flag)
            updates[col.remove] = gr.update(visible=sum(flags) > 1)
        return updates

    def apply_settings(self, settings: Mapping[str, Any], note: str = "") -> dict[Any, Any]:
        """Put validated page settings on the page: prompt, seed, mode, then one column per entry."""
        count = len(settings["columns"])
        updates = self.layout([i < count for i in range(MAX_COLUMNS)])
        updates |= {self.prompt: settings["prompt"], self.seed: settings["seed"], self.mode: settings["mode"],
                    self.settings_json: settings_to_json(settings), self.url_token: encode_url_state(settings),
                    self.status: note}
        updates |= self.chat_visibility(settings["mode"])
        for col, column in zip(self.columns, settings["columns"], strict=False):
            updates |= col.updates_for(column)
        return updates

    def chat_visibility(self, mode: str) -> dict[Any, Any]:
        chat = mode == "chat"
        updates: dict[Any, Any] = {self.clear_chat: gr.update(visible=chat)}
        for col in self.columns:
            updates[col.chatbot] = gr.update(visible=chat)
        return updates

    def apply_outputs(self) -> list[Any]:
        outputs = [self.visible, self.add, self.prompt, self.seed, self.mode, self.settings_json, self.url_token,
                   self.status, self.clear_chat]
        for col in self.columns:
            outputs += [col.settings_box, col.output_box, col.remove, col.notice, col.chatbot,
                        *col.knobs.values(), *col.groups.values()]
        return list(dict.fromkeys(outputs))

    def setting_inputs(self) -> set[Any]:
        inputs = {self.prompt, self.seed, self.mode, self.visible}
        for col in self.columns:
            inputs.update(col.knobs.values())
        return inputs


def _build_columns() -> list[ColumnControls]:
    """Settings cards in one row and output cards in the next, so outputs line up whatever the knobs' height."""
    with gr.Row(equal_height=False, elem_classes=["cards"]):
        settings = [build_settings(i) for i in range(MAX_COLUMNS)]
    with gr.Row(equal_height=False, elem_classes=["cards"]):
        outputs = [build_output(i) for i in range(MAX_COLUMNS)]
    columns = []
    for i, ((box, knobs, groups, remove, notice), (out_box, output, chatbot, tokens)) in enumerate(
            zip(settings, outputs, strict=True)):
        columns.append(ColumnControls(i, box, out_box, knobs, groups, remove, notice, output, chatbot, tokens))
    return columns


def _build_page() -> Page:
    gr.Markdown("# Decoding Playground\nOne prompt, up to four decoding settings side by side: the text they "
                "produce, how fast, and how much KV cache they hold. Models load on first use.",
                elem_classes=["intro"])
    with gr.Row(equal_height=False):
        prompt = gr.Textbox(DEFAULT_PROMPT, label="prompt", lines=4, max_lines=12, elem_id="prompt", scale=5)
        with gr.Column(scale=2, min_width=220):
            mode = gr.Radio(MODE_LABELS, value="auto", label="prompt format", elem_id="mode")
            seed = gr.Number(0, label="seed (all columns)", precision=0, minimum=0, elem_id="seed")
    with gr.Row(elem_classes=["toolbar"]):
        run = gr.Button("▶ Run all columns", variant="primary", elem_id="run", scale=2)
        stop = gr.Button("■ Stop", variant="stop", elem_id="stop", scale=1)
        add = gr.Button("+ Add column", elem_id="add-column", scale=1)
        clear_chat = gr.Button("Clear conversation", elem_id="clear-chat", scale=1, visible=False)
    with gr.Row(elem_classes=["presets"]):
        gr.Markdown("**Presets**", elem_classes=["presets-label"])
        presets = {name: gr.Button(name, size="sm", elem_id=f"preset-{n}") for n, name in enumerate(PRESETS)}
    status = gr.Markdown("", elem_id="status", elem_classes=["status"])
    columns = _build_columns()
    with gr.Row(elem_classes=["token-bar"]):
        colour_by = gr.Radio(list(COLOUR_MODES), value="probability", label="colour tokens by", scale=0,
                             min_width=260, elem_id="colour-by")
        legend = gr.HTML(legend_html("probability"), js_on_load=None)
    diff = gr.Markdown("Run two or more columns to see where their outputs diverge.", elem_id="diff",
                       elem_classes=["diff"])
    gr.Markdown("## Comparison")
    with gr.Row(equal_height=False):
        metrics = gr.Dataframe(value=empty_metrics(), label="metrics (★ best in row)", elem_id="metrics",
                               interactive=False, datatype="markdown", scale=3, max_height=560, wrap=True)
        with gr.Column(scale=2, min_width=300):
            speed_plot = gr.BarPlot(throughput_frame([], []), x="run", y="tokens/s", x_title="column",
                                    title="decode speed (tokens/s)", height=240, elem_id="speed-plot", y_lim=[0, None])
            with gr.Row():
                download_json = gr.DownloadButton("⬇ results JSON", interactive=False, size="sm",
                                                  elem_id="download-json")
                download_csv = gr.DownloadButton("⬇ results CSV", interactive=False, size="sm",
                                                 elem_id="download-csv")
    with gr.Row(equal_height=False):
        empty = [None] * MAX_COLUMNS
        line_style = {"color": "column", "color_map": slot_colours(MAX_COLUMNS), "height": 260, "y_lim": [0, None]}
        latency_plot = gr.LinePlot(latency_frame(empty, empty), x="step", y="ms/token", elem_id="latency-plot",
                                   title="latency per token (ms; compile spikes show at the start)",
                                   tooltip=["run", "step", "ms/token"], **line_style)
        kv_plot = gr.LinePlot(kv_frame(empty, empty), x="decoding step", y="KV cache (MiB)", elem_id="kv-plot",
                              title="KV-cache size over the run (MiB)",
                              tooltip=["run", "decoding step", "KV cache (MiB)"], **line_style)
    with gr.Accordion("Reproduce and share: run settings as JSON", open=False, elem_id="reproduce"):
        gr.Markdown("The settings of the last run (or preset). Edit or paste settings here and press *apply*; "
                    "the page address also carries them, so a copied link restores this comparison.")
        settings_json = gr.Code("", language="json", label="run settings", elem_id="settings-json",
                                interactive=True, max_lines=24)
        apply = gr.Button("Apply settings", size="sm", elem_id="apply-settings")
        url_token = gr.Textbox("", visible=False, elem_id="url-token")
    with gr.Accordion("Which strategy works with which cache", open=False):
        rows = compatibility.table()
        gr.Dataframe(value=[list(r.values()) for r in rows], headers=list(rows[0]), interactive=False)
    return Page(prompt=prompt, seed=seed, mode=mode, run=run, stop=stop, add=add, clear_chat=clear_chat,
                status=status, visible=gr.State([i < START_COLUMNS for i in range(MAX_COLUMNS)]),
                conversation=gr.State([]), results=gr.State(empty_outcome()), columns=columns, colour_by=colour_by,
                legend=legend, diff=diff, metrics=metrics, speed_plot=speed_plot, latency_plot=latency_plot,
                kv_plot=kv_plot, settings_json=settings_json, url_token=url_token, apply=apply, presets=presets,
                download_json=download_json, download_csv=download_csv)


def _wire_layout(page: Page) -> None:
    """Layout events stay outside the queue, so a long generation never delays someone's clicks."""
    layout_outputs = [page.visible, page.add] + [x for c in page.columns for x in (c.settings_box, c.output_box,
                                                                                  c.remove)]

    def add_column(flags: list[bool]) -> dict[Any, Any]:
        flags = list(flags)
        if False in flags:
            flags[flags.index(False)] = True
        return page.layout(flags)

    page.add.click(add_column, page.visible, layout_outputs, queue=False, api_visibility="private")
    for i, col in enumerate(page.columns):
        col.remove.click(lambda flags, i=i: page.layout([f and j != i for j, f in enumerate(flags)]),
                         page.visible, layout_outputs, queue=False, api_visibility="private")
        wire(col)
    page.mode.input(page.chat_visibility, page.mode, [page.clear_chat] + [c.chatbot for c in page.columns],
                    queue=False, api_visibility="private")

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
            return {page.status: gr.skip()}  # an empty dict would read as one value for 145 outputs
        try:
            return page.apply_settings(decode_url_state(token), "✓ Settings restored from the link.")
        except PlaygroundError as exc:
            return {page.status: f"⚠ **the link's settings were not applied:** {exc}"}

    for name, button in page.presets.items():
        def apply_preset(data: dict[Any, Any], name: str = name) -> dict[Any, Any]:
            current, _ = read_settings(page, data)
            columns, note = PRESETS[name](current["columns"][0])
            try:
                settings = parse_settings(page_settings(current["prompt"], current["seed"], current["mode"], columns))
            except PlaygroundError as exc:  # column 1's model or length, which presets keep, is not valid
                return {page.status: f"⚠ **{name} not applied:** {exc}"}
            return page.apply_settings(settings, f"**{name}:** {note}")

        button.click(apply_preset, page.setting_inputs(), outputs, queue=False, api_visibility="private").then(
            None, page.url_token, None, js=WRITE_URL_JS)
    page.apply.click(apply_json, page.settings_json, outputs, queue=False, api_visibility="private").then(
        None, page.url_token, None, js=WRITE_URL_JS)
    return restore


def _wire_run(page: Page) -> None:
    inputs = page.setting_inputs() | {page.conversation, page.colour_by}
    outputs = [page.status, page.results, page.metrics, page.speed_plot, page.latency_plot, page.kv_plot, page.diff,
               page.legend, page.conversation, page.prompt]
    for col in page.columns:
        outputs += [col.output, col.notice, col.tokens, col.chatbot]

    def snapshot(data: dict[Any, Any]) -> dict[Any, Any]:
        """The settings this run uses, into the JSON box and (by the next step's JS) the page address."""
        settings, _ = read_settings(page, data)
        return {page.settings_json: settings_to_json(settings), page.url_token: encode_url_state(settings)}

    def run_columns(data: dict[Any, Any], request: gr.Request,
                    progress: gr.Progress = gr.Progress()) -> Iterator[dict[Any, Any]]:  # noqa: B008 - Gradio idiom
        yield from run_all(page, data, request, progress)

    def exports(outcome: dict[str, Any]) -> dict[Any, Any]:
        if not any(outcome["results"]):
            return {page.download_json: gr.update(interactive=False), page.download_csv: gr.update(interactive=False)}
        labels = [name for name in outcome["labels"] if name is not None]
        results = [r for r, name in zip(outcome["results"], outcome["labels"], strict=True) if name is not None]
        json_path, csv_path = write_exports(outcome["settings"], results, labels)
        return {page.download_json: gr.update(value=str(json_path), interactive=True),
                page.download_csv: gr.update(value=str(csv_path), interactive=True)}

    for trigger in (page.run.click, page.prompt.submit):
        trigger(snapshot, page.setting_inputs(), [page.settings_json, page.url_token], queue=False,
                api_visibility="private").then(
            None, page.url_token, None, js=WRITE_URL_JS).then(
            run_columns, inputs, outputs, api_visibility="private", show_progress_on=[page.status]).then(
            exports, page.results, [page.download_json, page.download_csv], queue=False, api_visibility="private")

    def request_stop(request: gr.Request) -> str:
        stop_flag(request).set()
        return "■ Stopping after the current token…"

    # outside the queue, so it is not stuck behind the run it is meant to stop
    page.stop.click(request_stop, None, page.status, queue=False, api_visibility="private")


def api_run(prompt: str, spec: str) -> dict:
    """Run one generation; `spec` is a JSON object of RunSpec keys (missing keys take defaults)."""
    try:
        return runner.run_to_result(prompt, RunSpec.from_json(spec))
    except PlaygroundError as exc:
        raise gr.Error(str(exc)) from None


def build_ui() -> gr.Blocks:
    """The whole page; app.py queues it (one generation at a time) and launches it with CSS and THEME."""
    with gr.Blocks(title="Decoding Playground", fill_width=True) as demo:
        page = _build_page()
        _wire_layout(page)
        restore = _wire_settings(page)
        _wire_run(page)
        demo.load(restore, None, page.apply_outputs(), queue=False, api_visibility="private")
        demo.unload(forget_session)
        gr.api(api_run, api_name="run")
    demo.page = page  # type: ignore[attr-defined]  # for tests and scripts that drive handlers directly
    return demo


__all__ = ["Page", "api_run", "build_ui"]

"""The page's components: a prompt, up to four run columns side by side, metrics, plots and token views.

`Page` names every component the handlers read or write; `build_page()` creates them inside a Blocks context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground import compatibility
from playground.spec import MAX_REPEATS
from playground.ui.chat import MODE_LABELS
from playground.ui.columns import (
    MAX_COLUMNS,
    START_COLUMNS,
    ColumnControls,
    build_output,
    build_settings,
    output_classes,
    title_classes,
)
from playground.ui.cut import NOTHING_PICKED, cut_html
from playground.ui.events import Inputs, Updates
from playground.ui.export import (
    encode_url_state,
    settings_to_json,
)
from playground.ui.outcome import empty_outcome
from playground.ui.plots import (
    DRAWN_MS,
    LATENCY_FORMAT,
    MIN_STEP_SPAN,
    STEP_FORMAT,
    kv_frame,
    latency_frame,
    series_colours,
    throughput_frame,
)
from playground.ui.presets import PRESETS
from playground.ui.settings import PageSettings
from playground.ui.style import RUN_SHORTCUT
from playground.ui.table import STAR_RULE, empty_metrics
from playground.ui.tokens import COLOUR_MODES, DEFAULT_COLOUR, legend_html
from playground.ui.values import PageValues

# open-ended, so that the start columns (greedy against sampling) differ
DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


@dataclass
class Page:
    """Every component the handlers read or write; build_ui() fills it, handlers key their updates by it."""

    prompt: gr.Textbox
    seed: gr.Number
    repeats: gr.Slider
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
    cut: gr.HTML
    branch_choice: gr.Dropdown
    branch: gr.Button
    picked: gr.State
    preset_note: gr.Markdown
    metrics: gr.Dataframe
    process_memory: gr.Markdown
    speed_plot: gr.BarPlot
    latency_plot: gr.LinePlot
    latency_note: gr.Markdown  # which slow arrivals the latency plot draws at its top edge
    kv_plot: gr.LinePlot
    settings_json: gr.Code
    url_token: gr.Textbox
    apply: gr.Button
    presets: dict[str, gr.Button]
    download_json: gr.DownloadButton
    download_csv: gr.DownloadButton
    download_logprobs_json: gr.DownloadButton
    download_logprobs_csv: gr.DownloadButton
    step: gr.Button
    step_8: gr.Button
    step_text: gr.Textbox
    force_text: gr.Button
    run_to_end: gr.Button
    step_status: gr.Markdown
    steps: gr.State  # step mode: {"prompt": str, "trees": {slot: StepTree}}

    def layout(self, flags: list[bool]) -> Updates:
        """Show the columns whose flag is set; the last column cannot be removed, a fifth cannot be added."""
        updates: Updates = {self.visible: list(flags), self.add: gr.update(interactive=not all(flags))}
        position = 0
        for flag, col in zip(flags, self.columns, strict=True):
            updates[col.settings_box] = gr.update(visible=flag)
            updates[col.output_box] = gr.update(visible=flag)
            updates[col.remove] = gr.update(visible=sum(flags) > 1)
            if flag:  # numbered and coloured by position, so removing column 2 of 3 leaves columns 1 and 2
                updates[col.title] = gr.update(value=f"### Column {position + 1}", elem_classes=title_classes(position))
                updates[col.output_box] = gr.update(visible=True, elem_classes=output_classes(col.index, position))
                updates[col.output] = gr.update(label=f"column {position + 1} output")
                position += 1
        return updates

    def layout_outputs(self) -> list[Any]:
        """What `layout` sets."""
        return [self.visible, self.add] + [x for col in self.columns
                                           for x in (col.settings_box, col.output_box, col.remove, col.title,
                                                     col.output)]

    def apply_settings(self, settings: PageSettings, note: str = "") -> Updates:
        """Put validated page settings on the page: prompt, seed, mode, then one column per entry."""
        count = len(settings["columns"])
        updates = self.layout([i < count for i in range(MAX_COLUMNS)])
        updates |= {self.prompt: settings["prompt"], self.seed: settings["seed"], self.mode: settings["mode"],
                    self.repeats: settings.get("repeats", 1),
                    self.settings_json: settings_to_json(settings), self.url_token: encode_url_state(settings),
                    self.status: note, self.preset_note: ""}
        for component, update in self.chat_visibility(settings["mode"]).items():  # merged: layout relabels outputs
            updates[component] = {**updates.get(component, {}), **update}
        for col, column in zip(self.columns, settings["columns"], strict=False):
            updates |= col.updates_for(column)
        # set here: the label's change listeners do not fire for updates made by an event outside the queue
        flags = [i < count for i in range(MAX_COLUMNS)]
        updates[self.run] = self.run_label(flags, *(updates.get(col.notice, "") for col in self.columns))
        return updates

    def chat_outputs(self) -> list[Any]:
        """What chat_visibility sets. Gradio re-applies a component's constructor visibility when its parent
        column's visibility is updated in the same response, so every event that shows or hides cards (a link,
        a preset, settings JSON, adding or removing a column) sets these again in a step of its own."""
        return [self.clear_chat] + [x for col in self.columns for x in (col.chatbot, col.output, *col.cold.shown)]

    def chat_visibility(self, mode: str) -> Updates:
        """In chat mode the transcript shows each reply, so the plain output box steps aside (kept in the page,
        hidden, for scripts that read `output-N`) rather than showing every reply a second time."""
        chat = mode == "chat"
        updates: Updates = {self.clear_chat: gr.update(visible=chat)}
        for col in self.columns:
            updates[col.chatbot] = gr.update(visible=chat)
            updates |= {shown: gr.update(visible=chat) for shown in col.cold.shown}
            updates[col.output] = gr.update(visible="hidden" if chat else True)
        return updates

    def apply_outputs(self) -> list[Any]:
        """What `apply_settings` sets."""
        outputs: list[Any] = [self.visible, self.add, self.prompt, self.seed, self.repeats, self.mode,
                              self.settings_json, self.url_token, self.status, self.preset_note, self.clear_chat,
                              self.run]
        for col in self.columns:
            outputs += [col.settings_box, col.output_box, col.title, col.output, col.remove, col.notice, col.chatbot,
                        *col.cold.shown, *col.knobs.values(), *col.groups.values()]
        return list(dict.fromkeys(outputs))

    def lockable(self) -> list[Any]:
        """Every control that changes what a run computes, and the buttons that change the columns."""
        controls: list[Any] = [self.prompt, self.seed, self.repeats, self.mode, self.add, self.apply,
                               *self.presets.values()]
        for col in self.columns:
            controls += [col.remove, *col.knobs.values()]
        return controls

    def run_label(self, flags: list[bool], *notices: str) -> Any:
        """The Run button says how many of the visible columns can run as set."""
        shown = [notice for flag, notice in zip(flags, notices, strict=False) if flag]
        refused = sum(1 for notice in shown if notice.startswith("⚠"))
        if not refused:
            return gr.update(value=f"▶ Run all {len(shown)} columns" if len(shown) > 1 else "▶ Run")
        return gr.update(value=f"▶ Run {len(shown) - refused} of {len(shown)} columns ({refused} cannot run as set)")

    def setting_inputs(self) -> set[Any]:
        """The inputs of every handler that reads the page's settings (with `read`)."""
        inputs = {self.prompt, self.seed, self.repeats, self.mode, self.colour_by, self.visible}
        for col in self.columns:
            inputs.update(col.knobs.values())
        return inputs

    def read(self, data: Inputs) -> PageValues:
        """The values of setting_inputs(), as Gradio hands them over (keyed by component), by name."""
        return PageValues(prompt=data[self.prompt], seed=data[self.seed], repeats=data[self.repeats],
                          mode=data[self.mode], colour_by=data[self.colour_by], visible=tuple(data[self.visible]),
                          columns=tuple(col.read(data) for col in self.columns))


def _build_columns() -> list[ColumnControls]:
    """Settings cards in one row and output cards in the next, so outputs line up whatever the knobs' height."""
    with gr.Column(elem_classes=["columns-area"]):  # on a phone the cards interleave: settings, then output
        with gr.Row(equal_height=False, elem_classes=["cards"]):
            settings = [build_settings(i) for i in range(MAX_COLUMNS)]
        with gr.Row(equal_height=False, elem_classes=["cards"]):
            outputs = [build_output(i) for i in range(MAX_COLUMNS)]
    columns = []
    for i, ((box, knobs, groups, title, remove, notice),
            (out_box, output, chatbot, tokens, beams, step, strip, candidates, branches, cold)) in \
            enumerate(zip(settings, outputs, strict=True)):
        columns.append(ColumnControls(i, box, out_box, knobs, groups, title, remove, notice, output, chatbot,
                                      tokens, beams, step, strip, candidates, branches, cold))
    return columns


def _step_bar() -> dict[str, Any]:
    """Step mode: advance every column by a token or eight, force typed text, or run on to the end."""
    with gr.Row(elem_classes=["step-bar"], equal_height=True):
        step = gr.Button("Step", elem_id="step", scale=0, min_width=80, size="sm")
        step_8 = gr.Button("Step 8", elem_id="step-8", scale=0, min_width=80, size="sm")
        step_text = gr.Textbox("", show_label=False, placeholder="text to force in every column",
                               elem_id="step-text", scale=3, min_width=180, lines=1, max_lines=1)
        force_text = gr.Button("Force text", elem_id="step-force", scale=0, min_width=110, size="sm")
        run_to_end = gr.Button("Run to the end", elem_id="step-run-to-end", scale=0, min_width=140, size="sm")
    step_status = gr.Markdown("Step mode: **Step** advances every column one token from where it stands; each "
                              "column then shows its candidates (a click forces one) and its branch tree. A "
                              "sampling column's k-th Step draws what its whole run draws at token k (the run's "
                              "random draws are replayed); **Run to the end** continues as one run.",
                              elem_id="step-status", elem_classes=["step-status"])
    return {"step": step, "step_8": step_8, "step_text": step_text, "force_text": force_text,
            "run_to_end": run_to_end, "step_status": step_status}


def _header() -> dict[str, Any]:
    """Title, prompt, prompt format, seed, the toolbar, the presets and the status line."""
    gr.Markdown("# Decoding Playground\nOne prompt, up to four decoding settings side by side: the text they "
                "produce, how fast, and how much KV cache they hold. Models load on first use.",
                elem_classes=["intro"])
    with gr.Row(equal_height=False):
        prompt = gr.Textbox(DEFAULT_PROMPT, label="prompt", lines=4, max_lines=12, elem_id="prompt", scale=5,
                            info=f"{RUN_SHORTCUT} runs all columns")
        with gr.Column(scale=2, min_width=220):
            mode = gr.Radio(MODE_LABELS, value="auto", label="prompt format", elem_id="mode")
            seed = gr.Number(0, label="seed (all columns)", precision=0, elem_id="seed")
            repeats = gr.Slider(1, MAX_REPEATS, value=1, step=1, label="repeat timing N times", elem_id="repeats",
                                info="runs interleaved across columns; the table shows medians and ranges")
    with gr.Row(elem_classes=["toolbar"]):
        run = gr.Button(f"▶ Run all {START_COLUMNS} columns", variant="primary", elem_id="run", scale=2)
        # red only while a run is under way (wiring's lock step): nothing to stop before
        stop = gr.Button("■ Stop", variant="secondary", elem_id="stop", scale=1)
        add = gr.Button("+ Add column", elem_id="add-column", scale=1)
        clear_chat = gr.Button("Clear conversation", elem_id="clear-chat", scale=1, visible=False)
    with gr.Row(elem_classes=["presets"]):
        gr.Markdown("**Presets**", elem_classes=["presets-label"])
        presets = {name: gr.Button(name, size="sm", elem_id=f"preset-{n}") for n, name in enumerate(PRESETS)}
    status = gr.Markdown("", elem_id="status", elem_classes=["status"])
    return {"prompt": prompt, "mode": mode, "seed": seed, "repeats": repeats, "run": run, "stop": stop, "add": add,
            "clear_chat": clear_chat, "presets": presets, "status": status}


def _token_bar() -> dict[str, Any]:
    """How tokens are coloured, the legend, and where the columns' outputs diverge."""
    with gr.Row(elem_classes=["token-bar"]):
        colour_by = gr.Radio(list(COLOUR_MODES), value=DEFAULT_COLOUR, label="colour tokens by", scale=0,
                             min_width=420, elem_id="colour-by",
                             info="as drawn: after penalty, temperature and filters · model: its own softmax")
        legend = gr.HTML(legend_html(DEFAULT_COLOUR), js_on_load=None)
    diff = gr.Markdown("Run two or more columns to see where their outputs diverge.", elem_id="diff",
                       elem_classes=["diff"])
    return {"colour_by": colour_by, "legend": legend, "diff": diff}


def _sampling_cut() -> dict[str, Any]:
    """The clicked token's sampling cut, and continuing every column from it with another candidate."""
    with gr.Column(elem_classes=["cut-panel"]):
        gr.Markdown("### Sampling cut and branching")
        cut = gr.HTML(cut_html(None, None, ""), elem_id="sampling-cut", js_on_load=None)
        with gr.Row(equal_height=True, elem_classes=["branch-row"]):
            branch_choice = gr.Dropdown([], label="continue from here with", elem_id="branch-choice",
                                        interactive=False, scale=2, min_width=200)
            branch = gr.Button(f"↪ continue from here ({NOTHING_PICKED})", elem_id="branch-from-token",
                               interactive=False, scale=1, min_width=200)
    return {"cut": cut, "branch_choice": branch_choice, "branch": branch}


METRIC_COLUMN_WIDTH: str | int = "190px"
RUN_COLUMN_WIDTH: str | int = "150px"  # the metrics table scrolls sideways inside itself


def _comparison() -> dict[str, Any]:
    """The metrics table, the plots and the downloads."""
    gr.Markdown("## Comparison")
    # what the applied preset shows: kept here beside the results, where the status line is overwritten by Run
    preset_note = gr.Markdown("", elem_id="preset-note", elem_classes=["preset-note"])
    empty: list[Any] = [None] * MAX_COLUMNS
    colours = series_colours(MAX_COLUMNS)  # every position named from the first draw, which fixes the colour domain
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            metrics = gr.Dataframe(value=empty_metrics(), label=f"metrics ({STAR_RULE})", elem_id="metrics",
                                   interactive=False, datatype="markdown", max_height=560, wrap=True,
                                   # fixed widths: left to itself the table squeezes every column into a phone's
                                   # width and each long column label wraps into a header many lines tall
                                   column_widths=[METRIC_COLUMN_WIDTH, *[RUN_COLUMN_WIDTH] * MAX_COLUMNS])
            process_memory = gr.Markdown("", elem_id="process-memory", elem_classes=["process-memory"])
        with gr.Column(scale=2, min_width=300):
            # bars named by column number, as the legends and cards are (a run's full label is in the tooltip):
            # long labels on the axis were cut on a phone
            speed_plot = gr.BarPlot(throughput_frame(empty, empty, empty), x="bar", y="tokens/s", x_title="column",
                                    title="decode speed (tokens/s)", height=240, elem_id="speed-plot", y_lim=[0, None],
                                    color="column", color_map=colours, colors_in_legend=[],  # the x axis names them
                                    tooltip=["run", "tokens/s"], x_label_angle=-20)
            with gr.Row():
                download_json = gr.DownloadButton("⬇ results JSON", interactive=False, size="sm",
                                                  elem_id="download-json")
                download_csv = gr.DownloadButton("⬇ results CSV", interactive=False, size="sm",
                                                 elem_id="download-csv")
            with gr.Row():  # each token's raw (the model's) and processed (as drawn) log-probability
                download_logprobs_json = gr.DownloadButton("⬇ token log-probs JSON", interactive=False, size="sm",
                                                           elem_id="download-logprobs-json")
                download_logprobs_csv = gr.DownloadButton("⬇ token log-probs CSV", interactive=False, size="sm",
                                                          elem_id="download-logprobs-csv")
    with gr.Row(equal_height=False):
        with gr.Column(min_width=300):
            latency_plot = gr.LinePlot(latency_frame(empty, empty, empty), x="token", y=DRAWN_MS, y_title="ms/token",
                                       elem_id="latency-plot", title="ms/token per arrival (JAX: per chunk)",
                                       tooltip=["run", "token", "ms/token"], color="column", color_map=colours,
                                       colors_in_legend=[], height=260, y_lim=[0, None], x_lim=[1, MIN_STEP_SPAN],
                                       x_axis_format=STEP_FORMAT, y_axis_format=LATENCY_FORMAT)
            latency_note = gr.Markdown("", elem_id="latency-note", elem_classes=["process-memory"])
        kv_plot = gr.LinePlot(kv_frame(empty, empty, empty), x="decoding step", y="KV cache (MiB)", elem_id="kv-plot",
                              title="KV-cache size over the run (MiB)",
                              tooltip=["run", "decoding step", "KV cache (MiB)"], color="column",
                              color_map=colours, colors_in_legend=[], height=260, y_lim=[0, None],
                              x_lim=[1, MIN_STEP_SPAN], x_axis_format=STEP_FORMAT)
    return {"preset_note": preset_note, "metrics": metrics, "process_memory": process_memory, "speed_plot": speed_plot,
            "latency_plot": latency_plot, "latency_note": latency_note, "kv_plot": kv_plot,
            "download_json": download_json, "download_csv": download_csv,
            "download_logprobs_json": download_logprobs_json, "download_logprobs_csv": download_logprobs_csv}


def _sharing() -> dict[str, Any]:
    """The settings as JSON (and the hidden URL token), and the compatibility table."""
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
    return {"settings_json": settings_json, "apply": apply, "url_token": url_token}


def build_page() -> Page:
    """Every component, in page order (call inside a gr.Blocks context)."""
    parts = _header() | _step_bar()
    parts["columns"] = _build_columns()
    parts |= _token_bar() | _sampling_cut() | _comparison() | _sharing()
    return Page(**parts, visible=gr.State([i < START_COLUMNS for i in range(MAX_COLUMNS)]),
                conversation=gr.State([]), results=gr.State(empty_outcome()), picked=gr.State(None),
                steps=gr.State({}))

"""The page's Sweep tab: one knob over several values on a set of prompts, drawn as curves while it runs.

A curve per measure the knob can move shows each value's median and, in grey, its lowest and highest row (a
temperature cannot change the KV cache's size or the tokens per pass: those plots are hidden); the scatter puts
each value's median quality against its median speed. Until a sweep has a row, a sentence stands where the plots
will be. Clicking a point (a curve's, or the scatter's) opens that row's tokens below the plots; a list names
every row too. Stop keeps the rows that finished.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground import registry
from playground.errors import PlaygroundError
from playground.models.catalog import model_choices
from playground.spec import RunSpec
from playground.sweep import prompt_sets
from playground.sweep.knobs import KnobValue, compile_note, parse_values, sweepable
from playground.sweep.presets import SWEEP_PRESETS
from playground.sweep.run import MAX_SEEDS, Sweep
from playground.ui.events import Inputs, Updates
from playground.ui.sweep_frames import (
    MEASURES,
    SCATTER_SPEED,
    SERIES_COLOURS,
    Measure,
    aggregate_table,
    clicked_row,
    measure_frame,
    quality_measure,
    row_label,
    scatter_frame,
)
from playground.ui.tab_parts import preset_buttons
from playground.ui.tokens import tokens_html

OWN_PROMPTS = "my own prompts (one per line)"
FIRST_PRESET = next(iter(SWEEP_PRESETS.values()))
EMPTY_NOTE = ("Run a sweep to see its curves here: one plot per measure the knob can move against the knob's "
              "values, a quality-against-speed scatter, and a table of each value's medians.")
WAITING_NOTE = "◔ The curves appear here when the sweep's first run finishes."
NOTHING_NOTE = "■ Stopped before any run finished: nothing to draw. Run the sweep again to see its curves."

# A click on a plot's mark reports Vega's description of it ("window: 64; agreement: 0.8; series: median") and
# the plot's number; the server finds the row it stands for (sweep_frames.clicked_row).
PICK_POINT_JS = """
document.addEventListener('click', (event) => {
  const mark = event.target.closest('[id^="sweep-plot-"] [role="graphics-symbol"]');
  if (!mark || mark.tagName.toLowerCase() === 'g') return;
  const plot = Number(mark.closest('[id^="sweep-plot-"]').id.replace('sweep-plot-', ''));
  trigger('click', {plot: plot, label: mark.getAttribute('aria-label') || ''});
});
"""


@dataclass
class SweepTab:
    """The tab's components; `inputs()` is what a run reads."""

    presets: dict[str, gr.Button]
    preset_note: gr.Markdown
    prompt_set: gr.Dropdown
    prompt_count: gr.Slider
    own_prompts: gr.Textbox
    knob: gr.Dropdown
    values: gr.Textbox
    seeds: gr.Slider
    model: gr.Dropdown
    backend: gr.Radio
    strategy: gr.Dropdown
    cache: gr.Dropdown
    max_new_tokens: gr.Number
    other: gr.Textbox
    compile_note: gr.Markdown
    run: gr.Button
    stop: gr.Button
    status: gr.Markdown
    empty_note: gr.Markdown  # before a sweep's first row: a sentence where the plots will be
    results: gr.Column  # the plots, the table and the row list: hidden until a sweep has a row
    plots: list[Any]
    table: gr.Dataframe
    row_choice: gr.Dropdown
    tokens: gr.HTML
    download_json: gr.DownloadButton
    download_csv: gr.DownloadButton
    state: gr.State  # {"sweep": the sweep's JSON object, "tokens": each row's token records}

    def inputs(self) -> list[Any]:
        return [self.prompt_set, self.prompt_count, self.own_prompts, self.knob, self.values, self.seeds, self.model,
                self.backend, self.strategy, self.cache, self.max_new_tokens, self.other]

    def request(self, data: Inputs) -> Sweep:
        """The sweep the controls describe; a PlaygroundError names what is wrong."""
        chosen = data[self.prompt_set]
        if chosen == OWN_PROMPTS:
            prompts = prompt_sets.pasted_prompts(data[self.own_prompts] or "")
        else:
            prompts = prompt_sets.prompt_set(chosen)[: int(data[self.prompt_count] or 1)]
        try:
            other = json.loads(data[self.other] or "{}")
        except json.JSONDecodeError as exc:
            raise PlaygroundError(f"other settings are not valid JSON ({exc.msg}); write an object such as "
                                  '{"residual_length": 16}') from None
        if not isinstance(other, dict):
            raise PlaygroundError("other settings must be a JSON object of run settings, such as {\"window\": 64}")
        knob = data[self.knob]
        values = parse_values(knob, data[self.values] or "")
        base = {"model": data[self.model], "backend": data[self.backend], "strategy": data[self.strategy],
                "cache": data[self.cache], "max_new_tokens": int(data[self.max_new_tokens] or 1), **other}
        return Sweep.over(knob, values, base, prompts, int(data[self.seeds] or 1))


def compile_note_for(knob: str, backend: str) -> str:
    if backend != "jax":
        return f"PyTorch compiles nothing: every value of {knob} runs at once."
    shapes = registry.knob(knob).shapes
    return f"On JAX, {compile_note(knob, shapes)}."


def build_sweep_tab() -> SweepTab:
    """The tab's components (call inside a gr.Tab)."""
    spec, preset = RunSpec(), FIRST_PRESET
    gr.Markdown("Move **one knob** over several values on a **set of prompts** (and seeds, when the strategy "
                "samples), and see speed, memory and text-quality measures as curves: each value's median, with "
                "its lowest and highest row in grey. Every run is compared with a greedy, fp32, dynamic-cache "
                "reference on the same prompt. Click a point to read that run's text.")
    presets, preset_note = preset_buttons("sweep", SWEEP_PRESETS)
    with gr.Row():
        with gr.Column(min_width=260):
            knob = gr.Dropdown(list(sweepable()), value=preset.knob, label="knob", elem_id="sweep-knob")
            values = gr.Textbox(preset.values, label="values (comma-separated)", elem_id="sweep-values")
            seeds = gr.Slider(1, MAX_SEEDS, value=preset.seeds, step=1, label="seeds per prompt (sampling only)",
                              elem_id="sweep-seeds")
            prompt_set = gr.Dropdown([*prompt_sets.SETS, OWN_PROMPTS], value=preset.prompt_set, label="prompts",
                                     elem_id="sweep-prompt-set")
            prompt_count = gr.Slider(1, len(prompt_sets.prompt_set(preset.prompt_set)), value=preset.prompt_count,
                                     step=1, label="prompts from the set", elem_id="sweep-prompt-count")
            own_prompts = gr.Textbox("", lines=4, label="your prompts, one per line", visible=False,
                                     elem_id="sweep-own-prompts")
        with gr.Column(min_width=260):
            model = gr.Dropdown(model_choices(), value=spec.model, label="model", allow_custom_value=True,
                                elem_id="sweep-model")
            backend = gr.Radio(list(registry.backend_names()), value=preset.spec.get("backend", spec.backend),
                               label="backend",
                               elem_id="sweep-backend")
            with gr.Row():
                strategy = gr.Dropdown(list(registry.strategy_names()), value=preset.spec["strategy"],
                                       label="strategy", elem_id="sweep-strategy", min_width=110)
                cache = gr.Dropdown(list(registry.cache_names()), value=preset.spec.get("cache", spec.cache),
                                    label="KV cache", elem_id="sweep-cache", min_width=110)
            max_new_tokens = gr.Number(preset.spec["max_new_tokens"], precision=0, minimum=1,
                                       label="max new tokens", elem_id="sweep-max-new-tokens")
            other = gr.Textbox("{}", label="other settings (JSON of run settings, e.g. {\"residual_length\": 16})",
                               elem_id="sweep-other")
    compile_text = gr.Markdown(compile_note_for(preset.knob, preset.spec.get("backend", spec.backend)),
                               elem_id="sweep-compile-note")
    with gr.Row():
        run = gr.Button("▶ Run sweep", variant="primary", elem_id="sweep-run")
        stop = gr.Button("■ Stop (keeps finished rows)", interactive=False, elem_id="sweep-stop")
    status = gr.Markdown("", elem_id="sweep-status")
    empty_note, results, plots, table, row_choice, tokens, download_json, download_csv = _results_area(
        preset.knob, preset.values)
    return SweepTab(presets, preset_note, prompt_set, prompt_count, own_prompts, knob, values, seeds, model, backend,
                    strategy, cache, max_new_tokens, other, compile_text, run, stop, status, empty_note, results, plots,
                    table, row_choice, tokens, download_json, download_csv, gr.State(None))


def _results_area(knob: str, values: str) -> tuple[gr.Markdown, gr.Column, list[Any], gr.Dataframe, gr.Dropdown,
                                                   gr.HTML, gr.DownloadButton, gr.DownloadButton]:
    """Below Run: a sentence until a sweep has a row; then a curve per measure the knob can move and the
    scatter, the medians table and the row shown in the token view; the downloads."""
    plots: list[Any] = []
    empty = empty_sweep(knob, parse_values(knob, values))
    empty_note = gr.Markdown(EMPTY_NOTE, elem_id="sweep-empty")
    with gr.Column(visible=False, elem_id="sweep-results") as results:
        with gr.Row(equal_height=True, elem_id="sweep-plots"):
            for i, measure in enumerate(MEASURES):
                plots.append(gr.LinePlot(measure_frame(empty, measure), x=knob, y=measure.title, color="series",
                                         color_map=SERIES_COLOURS, tooltip="all", height=260, min_width=300,
                                         elem_id=f"sweep-plot-{i}", label=measure.label))
            quality = quality_measure(knob)
            plots.append(gr.ScatterPlot(scatter_frame(empty), x=SCATTER_SPEED, y=quality.title, color=knob,
                                        tooltip=[knob, SCATTER_SPEED, quality.title, "row"], height=260,
                                        min_width=300, elem_id=f"sweep-plot-{len(MEASURES)}",
                                        label=scatter_label(quality)))
        # not wrapped: a narrow column's header wrapped a letter a line, hundreds of px tall on a phone; the
        # table scrolls sideways there instead
        table = gr.Dataframe(aggregate_table(empty), label="medians per value", interactive=False,
                             elem_id="sweep-table", wrap=False)
        row_choice = gr.Dropdown([], value=None, label="run shown (or click a point)", elem_id="sweep-row")
    tokens = gr.HTML("", elem_id="sweep-tokens", elem_classes=["token-view"], js_on_load=PICK_POINT_JS)
    with gr.Row():
        download_json = gr.DownloadButton("⬇ sweep JSON", interactive=False, size="sm", elem_id="sweep-download-json")
        download_csv = gr.DownloadButton("⬇ sweep CSV", interactive=False, size="sm", elem_id="sweep-download-csv")
    return empty_note, results, plots, table, row_choice, tokens, download_json, download_csv


def scatter_label(quality: Measure) -> str:
    return f"{quality.title} against speed, a point per value"


def apply_preset(tab: SweepTab, name: str) -> Updates:
    """Put a preset's knob, values, prompts and base settings on the tab (the rest at RunSpec's defaults)."""
    preset, spec = SWEEP_PRESETS[name], RunSpec()
    other = {k: v for k, v in preset.spec.items() if k not in ("backend", "strategy", "cache", "max_new_tokens")}
    backend = preset.spec.get("backend", spec.backend)
    return {tab.knob: preset.knob, tab.values: preset.values, tab.seeds: preset.seeds,
            tab.prompt_set: preset.prompt_set, tab.prompt_count: gr.update(value=preset.prompt_count, visible=True),
            tab.own_prompts: gr.update(visible=False), tab.model: spec.model, tab.backend: backend,
            tab.strategy: preset.spec.get("strategy", spec.strategy), tab.cache: preset.spec.get("cache", spec.cache),
            tab.max_new_tokens: preset.spec.get("max_new_tokens", spec.max_new_tokens),
            tab.other: json.dumps(other), tab.compile_note: compile_note_for(preset.knob, backend),
            tab.preset_note: f"**What to look for** ({name}): {preset.note}"}


def choose_prompts(tab: SweepTab, chosen: str) -> Updates:
    """A shipped set shows how many of its prompts to run; your own prompts show their box."""
    if chosen == OWN_PROMPTS:
        return {tab.prompt_count: gr.update(visible=False), tab.own_prompts: gr.update(visible=True)}
    count = len(prompt_sets.prompt_set(chosen))
    return {tab.prompt_count: gr.update(visible=True, maximum=count, value=count),
            tab.own_prompts: gr.update(visible=False)}


def empty_sweep(knob: str, values: tuple[KnobValue, ...]) -> dict[str, Any]:
    """What the plots draw before a sweep's first row."""
    return {"knob": knob, "values": list(values), "rows": [], "aggregates": []}


def show_row(tab: SweepTab, kept: dict[str, Any] | None, index: int | None) -> Updates:
    if not kept or index is None or not 0 <= index < len(kept["sweep"]["rows"]):
        return {}
    sweep = kept["sweep"]
    row = sweep["rows"][index]
    divergence = row["measures"].get("first_divergence")
    note = (f"<p class='sweep-row-note'>{row_label(sweep, index)}: {row['metrics']['tokens_per_s']:.1f} tokens/s"
            + (f", first differs from the reference at token {divergence + 1}" if divergence is not None else "")
            + "</p>")
    return {tab.row_choice: gr.update(value=row_label(sweep, index)),
            tab.tokens: note + tokens_html(kept["tokens"][index], diverge_at=divergence)}


def choose_row(tab: SweepTab, kept: dict[str, Any] | None, label: str | None) -> Updates:
    if not kept or not label:
        return {}
    labels = [row_label(kept["sweep"], i) for i in range(len(kept["sweep"]["rows"]))]
    return show_row(tab, kept, labels.index(label)) if label in labels else {}


def click_point(tab: SweepTab, kept: dict[str, Any] | None, evt: gr.EventData) -> Updates:
    """A click on a plot's point (see PICK_POINT_JS) opens the row it stands for."""
    try:
        plot, label = int(getattr(evt, "plot", -1)), str(getattr(evt, "label", ""))
    except (TypeError, ValueError):
        return {}
    return show_row(tab, kept, clicked_row(kept["sweep"] if kept else None, plot, label))

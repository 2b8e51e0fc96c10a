"""The page's Sweep tab: one knob over several values on a set of prompts, drawn as curves while it runs.

A curve per measure shows each value's median and, in grey, its lowest and highest row; the scatter puts each
value's median quality against its median speed. Clicking a point (a curve's, or the scatter's) opens that row's
tokens below the plots; a list names every row too. Stop keeps the rows that finished.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from playground import registry
from playground.errors import PlaygroundError
from playground.models.catalog import model_choices
from playground.spec import BACKENDS, RunSpec
from playground.sweep import prompt_sets
from playground.sweep.knobs import compile_note, parse_values, sweepable
from playground.sweep.presets import SWEEP_PRESETS
from playground.sweep.run import MAX_SEEDS, Sweep, aggregates, run_sweep, to_csv
from playground.ui.events import Inputs, Updates
from playground.ui.export import export_folder
from playground.ui.run import stop_flag
from playground.ui.sweep_frames import (
    LEGEND,
    MEASURES,
    SCATTER_SPEED,
    SERIES_COLOURS,
    aggregate_table,
    clicked_row,
    measure_frame,
    padded_limits,
    quality_measure,
    row_label,
    scatter_frame,
    value_text,
)
from playground.ui.tokens import tokens_html

OWN_PROMPTS = "my own prompts (one per line)"
FIRST_PRESET = next(iter(SWEEP_PRESETS.values()))
DRAW_INTERVAL_S = 1.0  # the plots are redrawn at most this often while rows arrive (a redraw costs the 2 cores)

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
    with gr.Row(elem_id="sweep-presets"):
        presets = {name: gr.Button(name, size="sm", elem_id=f"sweep-preset-{i}")
                   for i, name in enumerate(SWEEP_PRESETS)}
    preset_note = gr.Markdown("", elem_id="sweep-preset-note")
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
            backend = gr.Radio(list(BACKENDS), value=preset.spec.get("backend", spec.backend), label="backend",
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
    plots, table, row_choice, tokens, download_json, download_csv = _results_area(preset.knob, preset.values)
    return SweepTab(presets, preset_note, prompt_set, prompt_count, own_prompts, knob, values, seeds, model, backend,
                    strategy, cache, max_new_tokens, other, compile_text, run, stop, status, plots, table, row_choice,
                    tokens, download_json, download_csv, gr.State(None))


def _results_area(knob: str, values: str) -> tuple[list[Any], gr.Dataframe, gr.Dropdown, gr.HTML,
                                                   gr.DownloadButton, gr.DownloadButton]:
    """Below Run: a curve per measure and the scatter (empty until rows arrive), the medians table, the row
    shown in the token view, and the downloads."""
    plots: list[Any] = []
    empty = empty_sweep(knob, parse_values(knob, values))
    with gr.Row(equal_height=True, elem_id="sweep-plots"):
        for i, measure in enumerate(MEASURES):
            plots.append(gr.LinePlot(measure_frame(empty, measure), x=knob, y=measure.label, color="series",
                                     color_map=SERIES_COLOURS, tooltip="all",
                                     height=260, min_width=300, elem_id=f"sweep-plot-{i}", label=measure.label))
        quality = quality_measure(knob)
        plots.append(gr.ScatterPlot(scatter_frame(empty), x=SCATTER_SPEED, y=quality.label, color=knob,
                                    tooltip=[knob, SCATTER_SPEED, quality.label, "row"], height=260,
                                    min_width=300, elem_id=f"sweep-plot-{len(MEASURES)}",
                                    label=f"{quality.label} against speed (a point per value)"))
    table = gr.Dataframe(None, label="medians per value", interactive=False, elem_id="sweep-table", wrap=True)
    row_choice = gr.Dropdown([], value=None, label="run shown (or click a point)", elem_id="sweep-row")
    tokens = gr.HTML("", elem_id="sweep-tokens", elem_classes=["token-view"], js_on_load=PICK_POINT_JS)
    with gr.Row():
        download_json = gr.DownloadButton("⬇ sweep JSON", interactive=False, size="sm", elem_id="sweep-download-json")
        download_csv = gr.DownloadButton("⬇ sweep CSV", interactive=False, size="sm", elem_id="sweep-download-csv")
    return plots, table, row_choice, tokens, download_json, download_csv


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


def empty_sweep(knob: str, values: tuple[float | int, ...]) -> dict[str, Any]:
    """What the plots draw before a sweep's first row."""
    return {"knob": knob, "values": list(values), "rows": [], "aggregates": []}


def _plot_updates(tab: SweepTab, sweep: dict[str, Any], *, final: bool = False) -> Updates:
    """Every plot and the table for the rows so far. The scatter's legend names the values, so a new sweep's
    values redraw it with their colours (Gradio keeps a plot's colour domain until its legend changes).

    The axes reach past the data (padded_limits) only in the finished sweep's update, sent with its data; until
    then they are left to fit the data. Gradio redraws a plot whose limits change from the data it holds when the
    redraw starts, and a data update that arrives during that redraw is lost (plots.step_axes): limits that
    moved with every batch of rows could drop a later batch. A batch changes only data, and the finish's redraw
    starts from the final rows.
    """
    knob = sweep["knob"]
    # the legend is set here, not when built: a plot first drawn in a hidden tab draws an empty legend, and a
    # changed legend makes Gradio draw the plot again (now visible)
    updates: Updates = {}
    for plot, measure in zip(tab.plots, MEASURES, strict=False):
        frame = measure_frame(sweep, measure)
        updates[plot] = gr.update(value=frame, x=knob, colors_in_legend=list(LEGEND),
                                  y_lim=padded_limits(frame[measure.label], above_zero=True) if final else None)
    quality = quality_measure(knob)
    scatter = scatter_frame(sweep)
    updates[tab.plots[-1]] = gr.update(value=scatter, y=quality.label, color=knob,
                                       x_lim=padded_limits(scatter[SCATTER_SPEED]) if final else None,
                                       y_lim=padded_limits(scatter[quality.label]) if final else None,
                                       colors_in_legend=[value_text(v) for v in sweep["values"]],
                                       tooltip=[knob, SCATTER_SPEED, quality.label, "row"],
                                       label=f"{quality.label} against speed (a point per value)")
    updates[tab.table] = aggregate_table(sweep)
    return updates


def _exports(sweep: dict[str, Any]) -> tuple[Path, Path]:
    """Fresh files per sweep (old export folders go, as the page's run exports do)."""
    folder, stamp = export_folder()
    json_path, csv_path = folder / f"sweep-{sweep['knob']}-{stamp}.json", folder / f"sweep-{sweep['knob']}-{stamp}.csv"
    public = {**sweep, "rows": [{k: v for k, v in r.items() if k != "token_ids"} for r in sweep["rows"]]}
    json_path.write_text(json.dumps(public, indent=1), encoding="utf-8")
    csv_path.write_text(to_csv(sweep), encoding="utf-8")
    return json_path, csv_path


def _show_row(tab: SweepTab, kept: dict[str, Any] | None, index: int | None) -> Updates:
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
    return _show_row(tab, kept, labels.index(label)) if label in labels else {}


def click_point(tab: SweepTab, kept: dict[str, Any] | None, evt: gr.EventData) -> Updates:
    """A click on a plot's point (see PICK_POINT_JS) opens the row it stands for."""
    try:
        plot, label = int(getattr(evt, "plot", -1)), str(getattr(evt, "label", ""))
    except (TypeError, ValueError):
        return {}
    return _show_row(tab, kept, clicked_row(kept["sweep"] if kept else None, plot, label))


def _progress_text(done: int, total: int, what: str, started: float) -> str:
    return f"◔ run {min(done + 1, total)} of {total} ({time.monotonic() - started:.0f} s so far): {what}"


def run_sweep_tab(tab: SweepTab, data: Inputs, request: gr.Request, progress: gr.Progress) -> Iterator[Updates]:
    """Run the sweep in a worker thread; the curves grow as rows finish, Stop keeps what finished."""
    try:
        sweep = tab.request(data)
        sweep.checked_specs()
    except PlaygroundError as exc:
        yield {tab.status: f"⚠ {exc}"}
        return
    flag = stop_flag(request)
    flag.clear()
    events: queue.Queue[tuple[str, Any]] = queue.Queue()

    def work() -> None:
        try:
            events.put(("done", run_sweep(sweep, flag.is_set, lambda d, t, w: events.put(("progress", (d, t, w))),
                                          lambda row, result: events.put(("row", (row, result["tokens"]))))))
        except BaseException as exc:  # handed to the request's thread, which reports it
            events.put(("error", exc))

    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    tokens: list[Any] = []
    empty = empty_sweep(sweep.knob, sweep.values)
    yield {tab.run: gr.update(interactive=False), tab.stop: gr.update(interactive=True),
           tab.status: f"◔ starting: {len(sweep.prompts)} prompts, {len(sweep.values)} values",
           tab.row_choice: gr.update(choices=[], value=None), tab.tokens: "", tab.state: None,
           tab.download_json: gr.update(interactive=False), tab.download_csv: gr.update(interactive=False),
           tab.compile_note: compile_note_for(sweep.knob, sweep.spec.backend), **_plot_updates(tab, empty)}
    threading.Thread(target=work, name="sweep-page", daemon=True).start()
    try:
        yield from _follow(tab, sweep, events, rows, tokens, progress, started)
    finally:
        flag.set()  # a tab closed mid-sweep closes this generator: the sweep stops at its next token


def _follow(tab: SweepTab, sweep: Sweep, events: queue.Queue[tuple[str, Any]], rows: list[dict[str, Any]],
            tokens: list[Any], progress: gr.Progress, started: float) -> Iterator[Updates]:
    """The worker's events as page updates, until it finishes or fails."""
    drawn = 0.0
    partial_sweep = {"knob": sweep.knob, "values": list(sweep.values), "rows": rows, "aggregates": []}
    while True:
        kind, payload = events.get()
        if kind == "progress":
            done, total, what = payload
            if done >= total or what == "stopped":
                continue  # the last word is the finish's
            progress((done, total), desc=f"sweep: {what}")
            yield {tab.status: _progress_text(done, total, what, started)}
        elif kind == "row":
            rows.append(payload[0])
            tokens.append(payload[1])
            if time.monotonic() - drawn >= DRAW_INTERVAL_S:
                drawn = time.monotonic()
                partial_sweep["aggregates"] = aggregates(sweep.values, rows)
                yield _plot_updates(tab, partial_sweep)
        elif kind == "error":
            message = str(payload) if isinstance(payload, PlaygroundError) else f"{type(payload).__name__}: {payload}"
            yield {tab.status: f"⚠ the sweep failed: {message}", tab.run: gr.update(interactive=True),
                   tab.stop: gr.update(interactive=False)}
            return
        else:
            yield _finish(tab, payload, tokens, time.monotonic() - started)
            return


def _finish(tab: SweepTab, result: dict[str, Any], tokens: list[Any], seconds: float) -> Updates:
    kept = {"sweep": result, "tokens": tokens}
    labels = [row_label(result, i) for i in range(len(result["rows"]))]
    how = "■ stopped: kept the" if result["stopped"] else "✓ sweep done:"
    status = (f"{how} {len(result['rows'])} rows over {len(result['values'])} values of {result['knob']} "
              f"in {seconds:.0f} s; {result['compiles']} of its runs compiled JAX programs")
    json_path, csv_path = _exports(result)
    shown = _show_row(tab, kept, 0) if labels else {}
    return {tab.status: status, tab.state: kept, tab.run: gr.update(interactive=True),
            tab.stop: gr.update(interactive=False), tab.tokens: shown.get(tab.tokens, ""),
            tab.row_choice: gr.update(choices=labels, value=labels[0] if labels else None),
            tab.download_json: gr.update(value=str(json_path), interactive=bool(labels)),
            tab.download_csv: gr.update(value=str(csv_path), interactive=bool(labels)),
            **_plot_updates(tab, result, final=True)}

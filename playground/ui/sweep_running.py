"""Running a sweep from the Sweep tab: the worker thread, the plots' updates as its rows arrive, and the finish
with its exports.

The plots are set up once (which show, the knob's axis, legends), then get only data while rows arrive, and
their axis limits in an update of their own after the finish (see `plot_updates`).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from playground.errors import PlaygroundError
from playground.generation_slot import Holder
from playground.sweep.knobs import categorical
from playground.sweep.run import Sweep, aggregates, run_sweep, to_csv
from playground.ui.events import Inputs, Updates
from playground.ui.export import export_folder
from playground.ui.run import stop_flag
from playground.ui.sweep_frames import (
    LEGEND,
    MEASURES,
    SCATTER_SPEED,
    aggregate_table,
    measure_frame,
    padded_limits,
    quality_measure,
    row_label,
    scatter_frame,
    shown,
    value_text,
)
from playground.ui.sweep_tab import (
    NOTHING_NOTE,
    WAITING_NOTE,
    SweepTab,
    compile_note_for,
    empty_sweep,
    scatter_label,
    show_row,
)

DRAW_INTERVAL_S = 1.0  # the plots are redrawn at most this often while rows arrive (a redraw costs the 2 cores)


def plot_setup(tab: SweepTab, sweep: dict[str, Any], strategy: str) -> Updates:
    """What a sweep sets once, before its rows: which plots show (those a sweep of its knob on `strategy` can
    move), the knob's axis over its values (known before any row), the legends, no y limits yet, and the plots'
    data for `sweep` (empty)."""
    knob = sweep["knob"]
    updates = plot_updates(tab, sweep)
    # padded on both sides, below 0 too: Vega shifts a label that sits on the axis' end inward, and the first
    # value's "0.0" at the very start was drawn into the next tick's "0.2" ("0.00.2"); the margin is under a tick's
    # step, so no negative value gets a tick
    values_axis = None if categorical(knob) else padded_limits(pd.Series([float(v) for v in sweep["values"]]))
    for plot, show in zip(tab.plots, shown(knob, strategy), strict=False):
        # the legend is set here, not when built: a plot first drawn in a hidden tab draws an empty legend, and a
        # changed legend makes Gradio draw the plot again (now visible)
        updates[plot] = gr.update(**updates[plot], x=knob, colors_in_legend=list(LEGEND), x_lim=values_axis,
                                  y_lim=None, visible=show)
    quality = quality_measure(knob)
    updates[tab.plots[-1]] = gr.update(**updates[tab.plots[-1]], y=quality.title, color=knob, x_lim=None,
                                       y_lim=None, colors_in_legend=[value_text(v) for v in sweep["values"]],
                                       tooltip=[knob, SCATTER_SPEED, quality.title, "row"],
                                       label=scatter_label(quality))
    return updates


def plot_updates(tab: SweepTab, sweep: dict[str, Any]) -> Updates:
    """Every plot's data and the table for the rows so far, and nothing else.

    Only the setup (`plot_setup`) and the limits (`limit_updates`) change anything but data. Gradio redraws a
    plot whose limits, legend or axes change, from the data it holds when the redraw starts, and a data update
    that arrives during that redraw is lost (plots.step_axes): so the setup goes out before the sweep's rows, the
    batches of rows and the finish change only data, and the limits that fit the finished rows follow the
    finish's data in an update of their own, whose redraw starts from the final rows.
    """
    updates: Updates = {plot: gr.update(value=measure_frame(sweep, measure))
                        for plot, measure in zip(tab.plots, MEASURES, strict=False)}
    updates[tab.plots[-1]] = gr.update(value=scatter_frame(sweep))
    updates[tab.table] = aggregate_table(sweep)
    return updates


def limit_updates(tab: SweepTab, sweep: dict[str, Any]) -> Updates:
    """Axis limits a little wider than the finished sweep's values (padded_limits), alone: sent after the
    finish's data, so the redraw they cause draws the final rows."""
    updates: Updates = {}
    for plot, measure in zip(tab.plots, MEASURES, strict=False):
        updates[plot] = gr.update(y_lim=padded_limits(measure_frame(sweep, measure)[measure.title], above_zero=True))
    scatter, quality = scatter_frame(sweep), quality_measure(sweep["knob"])
    updates[tab.plots[-1]] = gr.update(x_lim=padded_limits(scatter[SCATTER_SPEED]),
                                       y_lim=padded_limits(scatter[quality.title]))
    return updates


def _results_shown(tab: SweepTab, rows: bool, note: str = WAITING_NOTE) -> Updates:
    """The plots once a sweep has a row; until then the sentence `note` in their place."""
    return {tab.results: gr.update(visible=rows), tab.empty_note: gr.update(value=note, visible=not rows)}


def _exports(sweep: dict[str, Any]) -> tuple[Path, Path]:
    """Fresh files per sweep (old export folders go, as the page's run exports do)."""
    folder, stamp = export_folder()
    json_path, csv_path = folder / f"sweep-{sweep['knob']}-{stamp}.json", folder / f"sweep-{sweep['knob']}-{stamp}.csv"
    public = {**sweep, "rows": [{k: v for k, v in r.items() if k != "token_ids"} for r in sweep["rows"]]}
    json_path.write_text(json.dumps(public, indent=1), encoding="utf-8")
    csv_path.write_text(to_csv(sweep), encoding="utf-8")
    return json_path, csv_path


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
                                          lambda row, result: events.put(("row", (row, result["tokens"]))),
                                          Holder("a sweep", owner=request.session_hash or "", yields=True))))
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
           tab.compile_note: compile_note_for(sweep.knob, sweep.spec.backend),
           **plot_setup(tab, empty, sweep.spec.strategy), **_results_shown(tab, False)}
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
                first = not drawn
                drawn = time.monotonic()
                partial_sweep["aggregates"] = aggregates(sweep.values, rows)
                # the first batch shows the plots, drawn (mounted) with their first rows
                yield {**plot_updates(tab, partial_sweep),
                       **(_results_shown(tab, True) if first else {})}
        elif kind == "error":
            message = str(payload) if isinstance(payload, PlaygroundError) else f"{type(payload).__name__}: {payload}"
            yield {tab.status: f"⚠ the sweep failed: {message}", tab.run: gr.update(interactive=True),
                   tab.stop: gr.update(interactive=False)}
            return
        else:
            yield _finish(tab, payload, tokens, time.monotonic() - started)
            if payload["rows"]:
                yield limit_updates(tab, payload)
            return


def _finish(tab: SweepTab, result: dict[str, Any], tokens: list[Any], seconds: float) -> Updates:
    kept = {"sweep": result, "tokens": tokens}
    labels = [row_label(result, i) for i in range(len(result["rows"]))]
    how = "■ stopped: kept the" if result["stopped"] else "✓ sweep done:"
    status = (f"{how} {len(result['rows'])} rows over {len(result['values'])} values of {result['knob']} "
              f"in {seconds:.0f} s; {result['compiles']} of its runs compiled JAX programs")
    json_path, csv_path = _exports(result)
    shown = show_row(tab, kept, 0) if labels else {}
    return {tab.status: status, tab.state: kept, tab.run: gr.update(interactive=True),
            tab.stop: gr.update(interactive=False), tab.tokens: shown.get(tab.tokens, ""),
            tab.row_choice: gr.update(choices=labels, value=labels[0] if labels else None),
            tab.download_json: gr.update(value=str(json_path), interactive=bool(labels)),
            tab.download_csv: gr.update(value=str(csv_path), interactive=bool(labels)),
            **plot_updates(tab, result), **_results_shown(tab, bool(labels), NOTHING_NOTE)}

"""Running the Context tab's measurements: a worker thread that measures each cache on each backend in turn through
the context command's own functions (which hold the one generation slot a piece at a time while they measure), the
plots and tables redrawn as each run finishes, progress while it works, and Stop.

The plots are set up once before the first run (every series named, with its colour and its legend entry), then
get only data: Gradio redraws a plot whose legend or colours change, and data sent during that redraw is lost
(ui/plots.step_axes). Gradio's line plot lists a legend's entries only when it is given them (`colors_in_legend`):
without them Vega draws the legend's title alone.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import gradio as gr

from playground.context.measure import measure_text
from playground.context.request import MeasureStopped
from playground.errors import PlaygroundError
from playground.generation_slot import Holder
from playground.limits import max_request_seconds
from playground.metrics import cpu_sample, machine_load
from playground.ui.context_frames import (
    ROOFLINE,
    colours,
    frames,
    legend_html,
    load_note,
    measured,
    planned_legend,
    planned_series,
    quality_table,
    speed_table,
)
from playground.ui.context_tab import (
    EMPTY_NOTE,
    ContextPlan,
    ContextTab,
    apply_preset,
    preset_outputs,
    show_cache_knobs,
    show_text_source,
)
from playground.ui.events import Handler, Inputs, Updates, on_private, writes
from playground.ui.run import stop_flag
from playground.ui.tab_parts import wire_run_and_stop

if TYPE_CHECKING:
    from playground.context.quality import References

TICK_S = 1.0  # while a piece of work says nothing new, the status line's seconds still move this often
NOTHING_NOTE = "■ Stopped before any run finished: nothing to draw."
Event = tuple[str, Any]


PLOT_KEYS = ("speed", "memory", "kl", "top1")  # tab.plots() in order


def _drawn_series(series: list[str]) -> dict[str, list[str]]:
    """Each plot's series: the speed plot's include each run's roofline."""
    names = list(colours(series))
    return {key: [n for n in names if key == "speed" or not n.endswith(f" {ROOFLINE}")] for key in PLOT_KEYS}


def _span(low: float, high: float) -> list[float]:
    return [low, high] if high > low else [low - 1, high + 1]


def plot_setup(tab: ContextTab, plan: ContextPlan, series: list[str]) -> Updates:
    """Before the first run: every series the plan draws with its colour, no data yet, and the x axes over what
    the plan measures (the lengths; positions 1 to the quality tokens), so that no axis starts at 0.

    No plot lists a legend: Vega lays its entries in one row that a plot cuts at its right edge (a fourth run at
    390 px), and a legend set before the runs named a stopped one that drew nothing. The tab's own legend above
    the plots (legend_html) names the runs as they finish."""
    empty, mapping, drawn = frames([], series), colours(series), _drawn_series(series)
    lengths, positions = _span(min(plan.request.lengths), max(plan.request.lengths)), _span(1, plan.request.tokens)
    updates: Updates = {tab.legend: "", tab.load: ""}
    for plot, key in zip(tab.plots(), PLOT_KEYS, strict=True):
        updates[plot] = gr.update(value=empty[key], color_map={n: mapping[n] for n in drawn[key]},
                                  colors_in_legend=[], x_lim=lengths if key in ("speed", "memory") else positions)
    return updates


def data_updates(tab: ContextTab, results: list[dict[str, Any]], series: list[str]) -> Updates:
    """The plots' data, the tables, the legend and the load warnings for the runs finished so far; a plot or a
    table with nothing to draw (speed after a quality-only run) is hidden rather than drawn empty."""
    drawn, has = frames(results, series), measured(results)
    updates: Updates = {plot: gr.update(value=drawn[key]) for plot, key in zip(tab.plots(), PLOT_KEYS, strict=True)}
    return updates | {tab.speed_table: speed_table(results), tab.quality_table: quality_table(results),
                      tab.speed_part: gr.update(elem_classes=_part_classes(has["speed"])),
                      tab.quality_part: gr.update(elem_classes=_part_classes(has["quality"])),
                      tab.legend: legend_html(results, series), tab.load: load_note(results)}


def _part_classes(shown: bool) -> list[str]:
    """A part's classes: hidden by the page's CSS, not by Gradio's `visible`, which unmounts its plots, and a
    plot drawn before threw in the browser once its part was hidden."""
    return ["context-part"] if shown else ["context-part", "context-part-empty"]


def _results_shown(tab: ContextTab, shown: bool, note: str = EMPTY_NOTE) -> Updates:
    return {tab.results: gr.update(visible=shown), tab.empty_note: gr.update(value=note, visible=not shown)}


def _measure_all(plan: ContextPlan, events: queue.Queue[Event], stopped: Callable[[], bool],
                 session: str = "") -> None:
    """The worker: each spec in turn; every report goes to `events`, the last one says how it ended. It holds the
    generation slot a piece at a time, as long work named for the tab (`session`: the tab's), so that a Step or a
    run in another tab, or an API request, waits at most one piece."""
    holder = Holder("a Long context run", owner=session, yields=True)
    try:
        # each piece of a measurement (a load, a length's run, a chunk of positions) gets a run's time limit
        deadline = [time.monotonic() + max_request_seconds()]

        def should_stop() -> bool:
            return stopped() or time.monotonic() > deadline[0]

        references: References = {}  # the full cache's rows, read once per backend for every cache of the plan
        for index, spec in enumerate(plan.specs):
            def progress(message: str, index: int = index) -> None:
                deadline[0] = time.monotonic() + max_request_seconds()
                events.put(("progress", (index, message)))

            progress("starting")
            before = cpu_sample()  # other work's share of the CPUs meanwhile: the speed figures' reliability
            result = measure_text(spec, plan.request, plan.text, plan.source, progress, should_stop, plan.where,
                                  references, holder=holder)
            events.put(("result", {**result, "machine_load": machine_load(before, cpu_sample())}))
            if stopped() and index + 1 < len(plan.specs):
                events.put(("stopped", None))
                return
        events.put(("done", None))
    except MeasureStopped as exc:
        events.put(("stopped" if stopped() else "timed out", str(exc)))
    except BaseException as exc:  # handed to the request's thread, which reports it
        events.put(("error", exc))


def run_context_tab(tab: ContextTab, data: Inputs, request: gr.Request, progress: gr.Progress) -> Iterator[Updates]:
    """Check the plan (a refusal is one line, and the tab keeps what it shows), then measure in a worker thread,
    drawing each run as it finishes."""
    try:
        plan = tab.plan(data)
    except PlaygroundError as exc:
        yield {tab.status: f"⚠ {exc}"}
        return
    flag = stop_flag(request)
    flag.clear()
    events: queue.Queue[Event] = queue.Queue()
    series, legend = planned_series(plan.specs), planned_legend(plan.specs)
    yield {tab.run: gr.update(interactive=False), tab.stop: gr.update(interactive=True), tab.state: [],
           tab.status: f"◔ starting: {len(plan.specs)} runs ({', '.join(series)})",
           **plot_setup(tab, plan, legend),
           **_results_shown(tab, False, "◔ The plots appear when the first run finishes.")}
    threading.Thread(target=_measure_all, args=(plan, events, flag.is_set, request.session_hash or ""),
                     name="context-page", daemon=True).start()
    try:
        yield from _follow(tab, series, legend, events, progress)
    finally:
        flag.set()  # a tab closed mid-run closes this generator: the measurement stops at its next token or chunk


def _follow(tab: ContextTab, series: list[str], legend: list[str], events: queue.Queue[Event],
            progress: gr.Progress) -> Iterator[Updates]:
    """The worker's reports as page updates (`series` names the runs in the status line, `legend` in the plots),
    until it ends."""
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    index, message, since = 0, "starting", started
    while True:
        try:
            kind, payload = events.get(timeout=TICK_S)
        except queue.Empty:
            yield {tab.status: _progress_text(series, index, message, since, started)}
            continue
        if kind == "progress":
            index, message = payload
            since = time.monotonic()
            progress((index, len(series)), desc=f"{series[index]}: {message}")
            yield {tab.status: _progress_text(series, index, message, since, started)}
        elif kind == "result":
            results.append(payload)
            yield {**data_updates(tab, results, legend), **_results_shown(tab, True), tab.state: list(results)}
        else:
            yield _finish(tab, kind, payload, results, len(series), time.monotonic() - started)
            return


def _progress_text(series: list[str], index: int, message: str, since: float, started: float) -> str:
    now = time.monotonic()
    return (f"◔ run {index + 1} of {len(series)}, **{series[index]}**: {message} ({now - since:.0f} s; "
            f"{now - started:.0f} s in all)")


def _finish(tab: ContextTab, kind: str, payload: Any, results: list[dict[str, Any]], planned: int,
            seconds: float) -> Updates:
    kept = f"kept the {len(results)} of {planned} runs that finished"
    if kind == "done":
        status = f"✓ done: {planned} runs in {seconds:.0f} s"
    elif kind == "stopped":
        status = f"■ stopped ({payload}): {kept}" if payload else f"■ stopped: {kept}"
    elif kind == "timed out":
        status = (f"■ a step of the measurement ran past the time limit of {max_request_seconds():.0f} s "
                  f"(PLAYGROUND_MAX_REQUEST_SECONDS) and stopped: {kept}")
    else:
        message = str(payload) if isinstance(payload, PlaygroundError) else f"{type(payload).__name__}: {payload}"
        status = f"⚠ {message} ({kept})"
    shown = _results_shown(tab, True) if results else _results_shown(tab, False, NOTHING_NOTE)
    return {tab.status: status, tab.run: gr.update(interactive=True), tab.stop: gr.update(interactive=False),
            **shown}


def wire(tab: ContextTab) -> None:
    """Presets and the choices outside the queue; Run in the queue, as a page run is (one at a time); Stop
    outside it. The handlers are named for the tab: Gradio names endpoints after functions, private ones too."""
    for name, button in tab.presets.items():
        on_private(button.click, Handler(partial(apply_preset, tab, name), tuple(preset_outputs(tab))))

    @writes(tab.groups.values())
    def context_cache_knobs(caches: list[str]) -> Updates:
        return show_cache_knobs(tab, caches)

    on_private(tab.caches.change, context_cache_knobs, tab.caches)

    @writes(tab.pasted, tab.uploaded)
    def context_text_source(source: str) -> Updates:
        return show_text_source(tab, source)

    on_private(tab.text_source.change, context_text_source, tab.text_source)
    outputs = (tab.run, tab.stop, tab.status, tab.state, tab.empty_note, tab.results, tab.legend, tab.load,
               tab.speed_part, tab.quality_part, tab.speed_table, tab.quality_table, *tab.plots())

    wire_run_and_stop("context", tab.run, tab.stop, tab.status, tab.inputs(), outputs, partial(run_context_tab, tab),
                      "■ Stopping after the current token or chunk; the finished runs stay…")

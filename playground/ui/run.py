"""Running every column in turn: streamed text, waiting notices, and the tables, plots and token views after each."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from playground import runner
from playground.decode_costs import against_alone
from playground.errors import PlaygroundError
from playground.events import DoneEvent, HypothesisEvent, ProgressEvent, TextEvent
from playground.generation_slot import Holder
from playground.metrics import busy_note, busy_warning
from playground.result import Result, combine_runs
from playground.spec import RunSpec
from playground.ui.cache_view import strip_updates
from playground.ui.chat import MODES, Conversation, history, messages, record_turn
from playground.ui.events import Inputs, Updates
from playground.ui.live import LIVE_RUNS
from playground.ui.outcome import Outcome, empty_outcome
from playground.ui.page import Page
from playground.ui.plots import kv_frame, latency_frame, latency_note, throughput_frame, value_limits
from playground.ui.reuse_view import page_scope, reuse_words
from playground.ui.settings import PageSettings
from playground.ui.strategy_view import across_columns, result_view
from playground.ui.table import empty_metrics, metrics_table, process_memory_note
from playground.ui.tokens import divergence_from_first, divergence_report, legend_html, result_tokens_html

logger = logging.getLogger(__name__)
# beam search returns its best sequence only at the end: meanwhile the card shows the leading beam, and says so
LEADING_BEAM = "▶ searching: the leading beam after {tokens} tokens (it may change until the search ends)"
# Streamed text is sent at most this often: every update costs the server (and a browser on the same machine)
# CPU time that the 2 cores would otherwise give the generation being timed.
STREAM_INTERVAL_S = 0.25


def stop_flag(request: gr.Request) -> threading.Event:
    """The session's stop request: set by Stop (outside the queue), read by its run between tokens."""
    return LIVE_RUNS.stop_flag(request.session_hash or "")


def forget_session(request: gr.Request) -> None:
    """A closed tab stops its run and forgets its flag (see LiveRuns.forget)."""
    LIVE_RUNS.forget(request.session_hash or "")


def render(page: Page, outcome: Outcome, colour_by: str) -> Updates:
    """Everything drawn from finished results: metrics, plots, token views and the divergence report."""
    # only columns with a result: a refused or removed column never gets a row of dashes that looks like one
    indices = [i for i, r in enumerate(outcome["results"]) if r is not None and outcome["labels"][i] is not None]
    results: list[Result | None] = [outcome["results"][i] for i in indices]
    labels = [str(outcome["labels"][i]) for i in indices]
    marks = divergence_from_first(results)
    updates: Updates = {
        page.metrics: metrics_table(results, labels) if indices else empty_metrics(),
        # named and coloured by position, as the cards are; legends name only the columns that ran. Sent as
        # updates, not bare frames: a run's later updates reach the page as diffs that Gradio applies in place to
        # the last one sent, which for a bare frame is the very object the plot draws from (its data emptied, the
        # plot's next redraw failed)
        page.speed_plot: gr.update(value=throughput_frame(outcome["results"], outcome["labels"], outcome["positions"])),
        page.latency_plot: gr.update(value=latency_frame(outcome["results"], outcome["labels"], outcome["positions"])),
        page.latency_note: latency_note(outcome["results"]),
        page.kv_plot: gr.update(value=kv_frame(outcome["results"], outcome["labels"], outcome["positions"])),
        page.diff: divergence_report(results, labels) + across_columns(results, labels),
        page.process_memory: process_memory_note(results),
        page.legend: legend_html(colour_by),
    }
    for i, result, mark in zip(indices, results, marks, strict=True):
        if result is not None:
            updates[page.columns[i].tokens] = result_tokens_html(result, result_view(result), colour_by, mark)
    for col, result in zip(page.columns, outcome["results"], strict=True):
        box = result_view(result).box_html(result) if result else ""
        updates[col.view_box] = gr.update(value=box, visible=bool(box))
        updates |= strip_updates(col.cache_step, col.cache_strip, result)
    return updates


def plot_limits(page: Page, outcome: Outcome) -> Updates:
    """The value axes of the speed and KV plots for the data `render` drew: room above the tallest bar and the
    highest line (ui.plots.value_limits).

    An update of its own, sent after the data's: Gradio sets an update's value after its other properties, and
    redraws a plot whose limits change from the data it holds when the redraw starts, so limits sent with new data
    redrew the old data, and the new data, arriving during that redraw, was lost (plots.step_axes).
    """
    speed = throughput_frame(outcome["results"], outcome["labels"], outcome["positions"])
    kv = kv_frame(outcome["results"], outcome["labels"], outcome["positions"])
    return {page.speed_plot: gr.update(y_lim=value_limits(speed["tokens/s"])),
            page.kv_plot: gr.update(y_lim=value_limits(kv["KV cache (MiB)"]))}


def render_outputs(page: Page) -> list[Any]:
    """What `render` sets."""
    return [page.metrics, page.process_memory, page.speed_plot, page.latency_plot, page.latency_note, page.kv_plot,
            page.diff, page.legend] + [x for col in page.columns for x in (col.tokens, col.view_box, col.cache_step,
                                                                           col.cache_strip)]


def recolour(page: Page, outcome: Outcome, colour_by: str) -> Updates:
    """Only the token views and their legend: the colour toggle redraws nothing else."""
    wanted = {page.legend, *(col.tokens for col in page.columns)}
    return {k: v for k, v in render(page, outcome, colour_by).items() if k in wanted}


def done_notice(result: Result) -> str:
    """The column's one-line summary under its output."""
    metrics = result["metrics"]
    count = result["new_tokens"]
    if result["extra"].get("stopped_while_compiling"):
        return (f"■ stopped while compiling, after {metrics['compile_s']:.0f} s: the compile goes on in the "
                "background, so these settings start sooner next time")
    if result["extra"].get("stopped_while_waiting"):
        return "■ stopped while waiting for the generation slot: nothing ran"
    parts = [f"✓ {count} token{'' if count == 1 else 's'}"]
    if metrics["tokens_per_s"]:
        parts.append(f"{metrics['tokens_per_s']:.1f} tok/s")
    parts += result_view(result).notice_parts(result)
    if "device" in result:
        parts.append(f"on {result['device']}")
    if alone := against_alone(result):
        parts.append(alone)
    if result["stopped"]:
        parts.append("stopped early")
    if reused := reuse_words(result):
        parts.append(reused)
    if len(result["sequences"]) > 1:
        parts.append(f"{len(result['sequences'])} sequences returned (first shown)")
    busy = busy_note(result["extra"].get("machine_load"))
    return " · ".join(parts) + (f"\n\n⚠ {busy}" if busy else "")


def _waiting_status(active: list[int], slot: int) -> str:
    now = active[slot] + 1
    waiting = [f"column {j + 1} waits for column {active[k] + 1}" for k, j in enumerate(active[1:]) if k + 1 > slot]
    tail = f"; {', '.join(waiting)}" if waiting else ""
    return (f"▶ Column {now} is running ({slot + 1} of {len(active)}){tail}. Columns run one after another, "
            "so each timing is its own.")


@dataclass
class _Run:
    """One press of Run: what every column shares, and what happened to each column so far."""

    page: Page
    settings: PageSettings
    active: list[int]  # the visible columns' slots, in order
    conversation: Conversation
    outcome: Outcome
    colour_by: str
    stop: threading.Event
    replies: dict[int, str] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)  # slot -> why it did not run (refusal or failure)
    timed: dict[int, list[Result]] = field(default_factory=dict)  # slot -> its repeated runs so far
    specs: dict[int, dict[str, Any]] = field(default_factory=dict)  # slot -> its RunSpec as given (a branch run)
    prefix_text: str = ""  # a branch run: the forced tokens' text, which each output starts with
    note: str = ""  # said after the summary (what a branch run forced)
    session: str = ""  # the page session's id: its columns' prefix-store scopes; whoever waits for the slot is told

    @property
    def repeats(self) -> int:
        return int(self.settings.get("repeats", 1))

    @property
    def chat(self) -> bool:
        return bool(self.settings["mode"] == "chat")

    @property
    def prompt(self) -> str:
        return str(self.settings["prompt"])


def _opening(run: _Run) -> Updates:
    """Outputs cleared and a waiting notice per column, before the first one starts."""
    page, active = run.page, run.active
    updates: Updates = {page.status: _waiting_status(active, 0), page.results: run.outcome}
    for slot, i in enumerate(active):
        col = page.columns[i]
        updates[col.output] = "" if i in run.refused else run.prefix_text
        updates[col.tokens] = ""
        waits = f"waiting: column {i + 1} waits for column {active[slot - 1] + 1}" if slot else "▶ starting"
        updates[col.notice] = f"⚠ {run.refused[i]}" if i in run.refused else waits
        if run.chat:
            updates[col.chatbot] = messages(run.conversation, i, run.prompt)
    return updates | render(page, run.outcome, run.colour_by)


def _text_update(run: _Run, i: int, text: str) -> Updates:
    col = run.page.columns[i]
    text = run.prefix_text + text
    update: Updates = {col.output: text}
    if run.chat:
        update[col.chatbot] = messages(run.conversation, i, run.prompt, text)
    return update


def _finish_column(run: _Run, i: int, result: Result) -> Updates:
    """A run of the column is done: its results so far combined (medians over the timed runs), all redrawn."""
    runs = run.timed.setdefault(i, [])
    runs.append(result)
    combined = combine_runs(runs)
    run.outcome["results"][i] = combined
    run.replies[i] = combined["text"]
    col = run.page.columns[i]
    notice = done_notice(combined) + (f" · {len(runs)} of {run.repeats} timed runs" if run.repeats > 1 else "")
    update = _text_update(run, i, combined["text"]) | {col.notice: notice, run.page.results: run.outcome}
    return update | render(run.page, run.outcome, run.colour_by)


def progress_shown(event: ProgressEvent, stopping: bool) -> tuple[float | None, str, str]:
    """(the progress bar's fraction, its words, the notice's mark) for a stage's report. A stage with no measure
    of how far it is (a compile, a kernel build: reported at 0 until it ends) gets no fraction, so the bar says
    what is under way and for how long rather than "0.0%" for minutes."""
    fraction = event.fraction if event.fraction > 0.0 else None
    if stopping:  # a load (or torch building kernels) cannot be cut short: say when it stops
        return fraction, f"stops once this ends: {event.message} · {event.elapsed_s:.0f} s so far", "■"
    return fraction, event.message + (f" · {event.elapsed_s:.0f} s" if event.elapsed_s >= 1 else ""), "◔"


def _stream_column(run: _Run, slot: int, i: int, progress: gr.Progress, round_: int) -> Iterator[Updates]:
    """One run of a column: progress while loading, coalesced text while generating (first round only; later
    rounds repeat the timing), everything drawn at the end."""
    col = run.page.columns[i]
    spec = RunSpec.from_dict(run.specs.get(i) or {**run.settings["columns"][slot], "seed": run.settings["seed"],
                                                  "chat": MODES[run.settings["mode"]]})
    running = "▶ running" if round_ == 0 else f"▶ timing run {round_ + 1} of {run.repeats}"
    yield {run.page.status: _waiting_status(run.active, slot), col.notice: running}
    last_sent = 0.0
    for event in runner.run(run.prompt, spec, should_stop=run.stop.is_set,
                            history=history(run.conversation, i) if run.chat else None,
                            holder=Holder("a Compare run", owner=run.session), scope=page_scope(run.session, i)):
        if isinstance(event, ProgressEvent):
            fraction, desc, mark = progress_shown(event, run.stop.is_set())
            progress(fraction, desc=f"column {i + 1}: {desc}")
            # on the status line too, beside Run where the eye is: the card's notice may be a screen further down
            yield {col.notice: f"{mark} {desc}",
                   run.page.status: f"{mark} **Column {i + 1}:** {desc}\n\n{_waiting_status(run.active, slot)}"}
        elif isinstance(event, TextEvent) and round_ == 0 and time.monotonic() - last_sent >= STREAM_INTERVAL_S:
            last_sent = time.monotonic()  # updates in between are skipped: the next one carries their text
            yield _text_update(run, i, event.text)
        elif isinstance(event, HypothesisEvent) and round_ == 0 and time.monotonic() - last_sent >= STREAM_INTERVAL_S:
            last_sent = time.monotonic()  # each one is whole: the latest replaces the last
            yield _text_update(run, i, event.text) | {col.notice: LEADING_BEAM.format(tokens=event.new_tokens)}
        elif isinstance(event, DoneEvent):
            yield _finish_column(run, i, event.result)
            yield plot_limits(run.page, run.outcome)  # after the data they fit, never with it


def _run_column(run: _Run, slot: int, i: int, progress: gr.Progress, round_: int) -> Iterator[Updates]:
    """A column's stream; a refusal or a crash is shown on that column and never costs the others their run."""
    col = run.page.columns[i]
    try:
        yield from _stream_column(run, slot, i, progress, round_)
    except PlaygroundError as exc:
        run.refused[i] = str(exc)
        yield {col.notice: f"⚠ {exc}"}
    except Exception as exc:  # noqa: BLE001 - a crash in one backend must not cost the other columns theirs
        logger.exception("column %d failed", i + 1)
        run.refused[i] = f"failed ({type(exc).__name__}: {exc})"
        yield {col.notice: f"⚠ this run failed ({type(exc).__name__}: {exc}); the other columns still run"}


def stopped_how(result: Result) -> str | None:
    """How a Stop cut a column's run short ("while compiling", "after 12 tokens"), or None if it ran to its end."""
    if not result["stopped"]:
        return None
    if result["extra"].get("stopped_while_compiling"):
        return "while compiling, before its first token"
    if result["extra"].get("stopped_while_waiting"):
        return "while waiting for the generation slot"
    count = result["new_tokens"]
    return f"after {count} token{'' if count == 1 else 's'}"


def summary(ran: int, refused: dict[int, str], not_run: int, seed: int,
            stopped: dict[int, str] | None = None) -> str:
    """The status line after a run: how many columns ran to their end, which a Stop cut short and how, and which
    did not run and why. It never says "✓" while a column says it was stopped."""
    stopped = stopped or {}
    finished = ran - len(stopped)
    parts = [f"{finished} column{'' if finished == 1 else 's'} ran"] if finished or not stopped else []
    if stopped:
        how = "; ".join(f"column {i + 1} {why}" for i, why in sorted(stopped.items()))
        parts.append(f"{len(stopped)} stopped ({how})")
    if refused:
        reasons = "; ".join(f"column {i + 1}: {why}" for i, why in sorted(refused.items()))
        parts.append(f"{len(refused)} refused or failed ({reasons})")
    if not_run:
        parts.append(f"{not_run} not run (stopped)")
    mark = "⚠" if refused or not ran else "■" if stopped or not_run else "✓"
    seed_note = f" on the same prompt with seed {seed}" if finished else ""
    return f"{mark} {', '.join(parts)}{seed_note}."


def _closing(run: _Run, not_run: int) -> Updates:
    ran = sum(r is not None for r in run.outcome["results"])
    busy = [i + 1 for i, r in enumerate(run.outcome["results"])
             if r is not None and (r["extra"].get("machine_load") or {}).get("busy")]
    contended = " " + busy_warning(f"Column{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))}") if busy else ""
    stopped = {i: how for i, r in enumerate(run.outcome["results"]) if r is not None and (how := stopped_how(r))}
    final: Updates = {run.page.status: summary(ran, run.refused, not_run, int(run.settings["seed"]), stopped)
                      + run.note + contended}
    if ran:  # the limits once more, well after the last data: on a busy machine a column's own limits update
        # could arrive while its data was still being drawn, and be lost (a bar drawn past the plot's top)
        final.update(plot_limits(run.page, run.outcome))
    if run.chat and run.replies:
        final[run.page.conversation] = record_turn(run.conversation, run.prompt, run.replies)
        final[run.page.prompt] = ""
    return final


def run_all(page: Page, data: Inputs, request: gr.Request, progress: gr.Progress) -> Iterator[Updates]:
    """Run each visible column on the same prompt and seed, streaming its text; stop ends it between tokens."""
    flag = stop_flag(request)
    flag.clear()
    values = page.read(data)
    settings, active = values.settings(), values.active
    run = _Run(page, settings, active, data[page.conversation] if settings["mode"] == "chat" else [],
               empty_outcome(settings, active), values.colour_by, flag, session=request.session_hash or "")
    with LIVE_RUNS.working(request.session_hash or "", "a run"):
        yield from run_rounds(run, progress)


def run_given(page: Page, outcome: Outcome, specs: dict[int, dict[str, Any]], refused: dict[int, str],
              prefix_text: str, note: str, colour_by: str, request: gr.Request,
              progress: gr.Progress) -> Iterator[Updates]:
    """The columns of a finished run again, each with the RunSpec given for its slot (a branch at a token), on the
    same prompt; the slots in `refused` are shown with their reason and skipped."""
    flag = stop_flag(request)
    flag.clear()
    settings = outcome["settings"]
    assert settings is not None, "a branch continues a finished run, which recorded its settings"
    active = [i for i, name in enumerate(outcome["labels"]) if name is not None]
    fresh: Outcome = {"settings": settings, "results": [None] * len(outcome["results"]),
                      "labels": list(outcome["labels"]), "positions": list(outcome["positions"])}
    run = _Run(page, settings, active, [], fresh, colour_by, flag, refused=dict(refused), specs=specs,
               prefix_text=prefix_text, note=note, session=request.session_hash or "")
    with LIVE_RUNS.working(request.session_hash or "", "a run"):
        yield from run_rounds(run, progress)


def run_outputs(page: Page) -> list[Any]:
    """What `run_all` and `run_given` set as the columns run."""
    outputs = [page.status, page.results, page.metrics, page.process_memory, page.speed_plot, page.latency_plot,
               page.latency_note, page.kv_plot, page.diff, page.legend, page.conversation, page.prompt]
    for col in page.columns:
        outputs += [col.output, col.notice, col.tokens, col.chatbot, col.view_box, col.cache_step, col.cache_strip]
    return outputs


def run_rounds(run: _Run, progress: gr.Progress) -> Iterator[Updates]:
    """The columns in turn, round by round (rounds interleave them, so drift on the machine hits them all)."""
    yield _opening(run)
    for round_ in range(run.repeats):
        for slot, i in enumerate(run.active):
            if run.stop.is_set():
                break
            if i not in run.refused:
                yield from _run_column(run, slot, i, progress, round_)
    not_run = [i for i in run.active if i not in run.timed and i not in run.refused]
    if not_run:
        yield {run.page.columns[j].notice: "■ not run (stopped)" for j in not_run}
    yield _closing(run, len(not_run))

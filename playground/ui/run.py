"""Running every column in turn: streamed text, waiting notices, and the tables, plots and token views after each."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import gradio as gr

from playground import runner
from playground.errors import PlaygroundError
from playground.events import DoneEvent, ProgressEvent, TextEvent
from playground.spec import RunSpec
from playground.ui.chat import MODES, history, messages, record_turn
from playground.ui.columns import MAX_COLUMNS, column_settings, label
from playground.ui.export import page_settings
from playground.ui.metrics import kv_frame, latency_frame, metrics_table, throughput_frame
from playground.ui.tokens import divergence_from_first, divergence_report, legend_html, tokens_html

if TYPE_CHECKING:
    from playground.ui.page import Page

logger = logging.getLogger(__name__)
# Streamed text is sent at most this often: every update costs the server (and a browser on the same machine)
# CPU time that the 2 cores would otherwise give the generation being timed.
STREAM_INTERVAL_S = 0.25
_STOP_FLAGS: dict[str, threading.Event] = {}  # session hash -> stop requested; set by `stop` outside the queue


def stop_flag(request: gr.Request) -> threading.Event:
    return _STOP_FLAGS.setdefault(request.session_hash or "", threading.Event())


def forget_session(request: gr.Request) -> None:
    """A closed tab's flag is dropped, so a long-lived Space does not collect one per visitor."""
    _STOP_FLAGS.pop(request.session_hash or "", None)


def read_settings(page: Page, data: dict[Any, Any]) -> tuple[dict[str, Any], list[int]]:
    """Page settings of the visible columns (in order) and those columns' indices."""
    active = [i for i, flag in enumerate(data[page.visible]) if flag]
    columns = []
    for i in active:
        knobs = page.columns[i].knobs
        columns.append(column_settings({name: data[c] for name, c in knobs.items()}))
    return page_settings(data[page.prompt], data[page.seed], data[page.mode], columns), active


def empty_outcome(settings: dict[str, Any] | None = None, active: list[int] | None = None) -> dict[str, Any]:
    """The results State: per column index its Result (or None) and label, plus the settings that produced them."""
    labels: list[str | None] = [None] * MAX_COLUMNS
    for i, column in zip(active or [], (settings or {}).get("columns", []), strict=False):
        labels[i] = label(i, column)
    return {"settings": settings, "results": [None] * MAX_COLUMNS, "labels": labels}


def render(page: Page, outcome: dict[str, Any], colour_by: str) -> dict[Any, Any]:
    """Everything drawn from finished results: metrics, plots, token views and the divergence report."""
    indices = [i for i, name in enumerate(outcome["labels"]) if name is not None]
    results = [outcome["results"][i] for i in indices]
    labels = [outcome["labels"][i] for i in indices]
    marks = divergence_from_first(results)
    updates: dict[Any, Any] = {
        page.metrics: metrics_table(results, labels) if indices else gr.skip(),
        page.speed_plot: throughput_frame(results, labels),
        page.latency_plot: latency_frame(outcome["results"], outcome["labels"]),  # by slot: colour per column
        page.kv_plot: kv_frame(outcome["results"], outcome["labels"]),
        page.diff: divergence_report(results, labels),
        page.legend: legend_html(colour_by),
    }
    for i, result, mark in zip(indices, results, marks, strict=True):
        if result is not None:
            updates[page.columns[i].tokens] = tokens_html(result.get("tokens"), colour_by, mark)
    return updates


def recolour(page: Page, outcome: dict[str, Any], colour_by: str) -> dict[Any, Any]:
    """Only the token views and their legend: the colour toggle redraws nothing else."""
    wanted = {page.legend, *(col.tokens for col in page.columns)}
    return {k: v for k, v in render(page, outcome, colour_by).items() if k in wanted}


def done_notice(result: dict[str, Any]) -> str:
    metrics = result.get("metrics") or {}
    speed = metrics.get("tokens_per_s")
    count = result.get("new_tokens", 0)
    parts = [f"✓ {count} token{'' if count == 1 else 's'}"]
    if speed:
        parts.append(f"{speed:.1f} tok/s")
    if metrics.get("acceptance_rate") is not None:
        parts.append(f"{100 * metrics['acceptance_rate']:.0f}% drafts accepted")
    if result.get("stopped"):
        parts.append("stopped early")
    if len(result.get("sequences") or []) > 1:
        parts.append(f"{len(result['sequences'])} sequences returned (first shown)")
    return " · ".join(parts)


def _waiting_status(active: list[int], slot: int) -> str:
    now = active[slot] + 1
    waiting = [f"column {j + 1} waits for column {active[k] + 1}" for k, j in enumerate(active[1:]) if k + 1 > slot]
    tail = f"; {', '.join(waiting)}" if waiting else ""
    return (f"▶ Column {now} is running ({slot + 1} of {len(active)}){tail}. Columns run one after another on "
            "this 2-core machine, so each timing is its own.")


def run_all(page: Page, data: dict[Any, Any], request: gr.Request, progress: gr.Progress) -> Iterator[dict[Any, Any]]:
    """Run each visible column on the same prompt and seed, streaming its text; stop ends it between tokens."""
    flag = stop_flag(request)
    flag.clear()
    settings, active = read_settings(page, data)
    mode, prompt = settings["mode"], settings["prompt"]
    conversation = data[page.conversation] if mode == "chat" else []
    outcome = empty_outcome(settings, active)
    colour_by = data[page.colour_by]
    first: dict[Any, Any] = {page.status: _waiting_status(active, 0), page.results: outcome}
    for slot, i in enumerate(active):
        col = page.columns[i]
        first[col.output] = ""
        first[col.tokens] = ""
        first[col.notice] = ("▶ starting" if slot == 0
                             else f"waiting: column {i + 1} waits for column {active[slot - 1] + 1}")
        if mode == "chat":
            first[col.chatbot] = messages(conversation, i, prompt)
    yield first | render(page, outcome, colour_by)
    replies: dict[int, str] = {}
    for slot, i in enumerate(active):
        col = page.columns[i]
        if flag.is_set():
            yield {page.columns[j].notice: "■ not run (stopped)" for j in active[slot:]}
            break
        try:
            spec = RunSpec.from_dict({**settings["columns"][slot], "seed": settings["seed"], "chat": MODES[mode]})
        except PlaygroundError as exc:
            yield {col.notice: f"⚠ {exc}"}
            continue
        yield {page.status: _waiting_status(active, slot), col.notice: "▶ running"}
        last_sent = 0.0
        try:
            events = runner.run(prompt, spec, should_stop=flag.is_set,
                                history=history(conversation, i) if mode == "chat" else None)
            for event in events:
                if isinstance(event, ProgressEvent):
                    progress(event.fraction, desc=f"column {i + 1}: {event.message}")
                    yield {col.notice: f"loading: {event.message}"}
                elif isinstance(event, TextEvent):
                    if time.monotonic() - last_sent < STREAM_INTERVAL_S:
                        continue  # the next update (or the final result) carries this text too
                    last_sent = time.monotonic()
                    update = {col.output: event.text}
                    if mode == "chat":
                        update[col.chatbot] = messages(conversation, i, prompt, event.text)
                    yield update
                elif isinstance(event, DoneEvent):
                    outcome["results"][i] = event.result
                    replies[i] = event.result["text"]
                    update = {col.output: event.result["text"], col.notice: done_notice(event.result),
                              page.results: outcome}
                    if mode == "chat":
                        update[col.chatbot] = messages(conversation, i, prompt, event.result["text"])
                    yield update | render(page, outcome, colour_by)
        except PlaygroundError as exc:
            # one column's refusal must not cost the others their run
            yield {col.notice: f"⚠ {exc}"}
        except Exception as exc:  # noqa: BLE001 - a crash in one backend must not cost the other columns theirs
            logger.exception("column %d failed", i + 1)
            yield {col.notice: f"⚠ this run failed ({type(exc).__name__}: {exc}); the other columns still run"}
    final: dict[Any, Any] = {page.status: "■ Stopped." if flag.is_set() else "✓ Done: every column ran on the "
                             f"same prompt with seed {settings['seed']}."}
    if mode == "chat" and replies:
        final[page.conversation] = record_turn(conversation, prompt, replies)
        final[page.prompt] = ""
    yield final

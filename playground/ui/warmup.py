"""Optional warm-up after launch: load the default model and compile the JAX programs of the page's default
columns and of every preset's JAX columns in the background, so visitors do not pay ~5-15 s per program set.

PLAYGROUND_WARMUP=1 turns it on, =0 off, =default warms the default columns only; unset, it is on on a Hugging
Face Space (SPACE_ID set) and off elsewhere. The page shows its progress. It never holds a visitor up for longer
than one request: before each request it waits until no run holds or waits for the generation slot
(playground/generation_slot.py), and a run that arrives meanwhile waits only for the request in progress.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict
from typing import Any, NamedTuple

import gradio as gr

from playground import runner
from playground.events import ProgressEvent
from playground.registry.builtin import REFERENCE_CACHE
from playground.spec import RunSpec
from playground.ui.chat import MODES
from playground.ui.events import Updates, on_private, writes
from playground.ui.live import LIVE_RUNS
from playground.ui.page import DEFAULT_PROMPT
from playground.ui.presets import PRESETS

logger = logging.getLogger(__name__)
# JAX greedy runs of the page's default prompt. Programs are keyed by the prompt's bucket and each layer's cache
# layout: the page's defaults (the growing cache, 64 new tokens: one length, 128 positions, for a short prompt)
# and the static cache, which shares the growing cache's programs at the same length.
WARMUP_SPECS = (RunSpec(backend="jax"), RunSpec(backend="jax", cache=REFERENCE_CACHE))
POLL_S = 2.0


class WarmUp(NamedTuple):
    """One request the warm-up runs: what the page calls it, and the prompt and spec a click would run."""

    label: str
    prompt: str
    spec: RunSpec


def default_requests() -> list[WarmUp]:
    return [WarmUp(f"default column · jax · {spec.cache}", DEFAULT_PROMPT, spec) for spec in WARMUP_SPECS]


def preset_requests() -> list[WarmUp]:
    """Every JAX column of every preset, as the page runs it after the preset's click (its prompt and prompt
    format; the seed is an argument of the programs, not part of their key)."""
    requests = []
    for name, preset in PRESETS.items():
        for column in preset.columns:
            if column["backend"] == "jax":
                spec = RunSpec.from_dict({**column, "chat": MODES[preset.mode]})
                requests.append(WarmUp(f"{name} · {spec.strategy} · {spec.cache}", preset.prompt, spec))
    return requests


def planned(scope: str) -> list[WarmUp]:
    """The requests of a warm-up, each distinct prompt and spec once (presets share columns)."""
    requests = default_requests() + (preset_requests() if scope == "presets" else [])
    seen, distinct = set(), []
    for request in requests:
        if (request.prompt, request.spec) not in seen:
            seen.add((request.prompt, request.spec))
            distinct.append(request)
    return distinct


def scope() -> str:
    """'presets' (the default columns and every preset's JAX columns), 'default' (the default columns), or ''
    (off)."""
    raw = os.environ.get("PLAYGROUND_WARMUP", "").strip().lower()
    if raw == "default":
        return "default"
    if raw:
        return "presets" if raw in ("1", "true", "yes") else ""
    return "presets" if os.environ.get("SPACE_ID") else ""


def enabled() -> bool:
    return bool(scope())


def start() -> threading.Thread | None:
    """Start the warm-up in a background thread when it is enabled (once); returns the thread."""
    if not enabled() or not LIVE_RUNS.claim_warmup():
        return None
    thread = threading.Thread(target=_run, args=(planned(scope()),), name="warm-up", daemon=True)
    thread.start()
    return thread


def _run(requests: list[WarmUp]) -> None:
    state = LIVE_RUNS.warmup
    state.total = len(requests)
    began = time.perf_counter()
    try:
        for request in requests:
            state.detail = f"waiting for a visitor's run to finish before {request.label}"
            runner.GENERATION_LOCK.wait_until_free()
            state.detail = request.label
            for event in runner.run(request.prompt, request.spec):
                if isinstance(event, ProgressEvent):
                    stage = event.message.split(" (")[0]  # the stage, without its parenthesised hint
                    state.detail = request.label + (f": {stage}" if event.fraction < 1.0 else "")
            state.done += 1
        state.phase = "done"
    except Exception as exc:  # noqa: BLE001 - a failed warm-up only costs a visitor the compile
        logger.warning("warm-up failed: %s", exc)
        state.phase, state.detail = "failed", str(exc)
    state.seconds = round(time.perf_counter() - began, 2)


def notice() -> str:
    """The page's line while the warm-up runs; empty otherwise."""
    state = LIVE_RUNS.warmup
    if state.phase != "running":
        return ""
    step = min(state.done + 1, state.total)
    return (f"◔ **Warming up** {step} of {state.total} ({state.detail}): the JAX programs of the default columns "
            "and the presets, after a restart. A run you start goes first; it waits at most for this request.")


def status() -> dict[str, Any]:
    """The warm-up's phase, what it is doing, requests done of total, and how long it took (an undocumented API
    for hosts and tests)."""
    return asdict(LIVE_RUNS.warmup)


def banner() -> tuple[gr.Markdown, gr.Timer]:
    """The notice and the timer that refreshes it (build inside the Blocks, where the notice should show)."""
    return (gr.Markdown(notice(), visible=bool(notice()), elem_id="warmup", elem_classes=["status"]),
            gr.Timer(POLL_S, active=False))


def wire(demo: gr.Blocks, markdown: gr.Markdown, timer: gr.Timer) -> None:
    """Show the notice on page load, poll it while the warm-up runs, stop polling once it is done."""
    @writes(markdown, timer)
    def refresh() -> Updates:
        text = notice()
        return {markdown: gr.update(value=text, visible=bool(text)), timer: gr.Timer(active=bool(text))}

    on_private(demo.load, refresh)
    on_private(timer.tick, refresh)
    gr.api(status, api_name="warmup", queue=False, api_visibility="undocumented")

"""Optional warm-up after launch: load the default model and compile the JAX decoder's greedy programs in the
background, so the first visitor does not pay ~30 s for them; the page shows a notice while it runs.

PLAYGROUND_WARMUP=1 turns it on, =0 off; unset, it is on on a Hugging Face Space (SPACE_ID set) and off
elsewhere. Runs that arrive meanwhile simply wait for the model and the generation lock it holds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict
from typing import Any

import gradio as gr

from playground import runner
from playground.events import ProgressEvent
from playground.spec import RunSpec
from playground.ui.events import Updates, on_private, writes
from playground.ui.live import LIVE_RUNS
from playground.ui.page import DEFAULT_PROMPT

logger = logging.getLogger(__name__)
# JAX greedy runs of the page's default prompt. Programs are keyed by the prompt's bucket and each layer's cache
# layout: the page's defaults (the growing cache, 64 new tokens: one length, 128 positions, for a short prompt)
# and the static cache, which shares the growing cache's programs at the same length.
WARMUP_SPECS = (RunSpec(backend="jax"), RunSpec(backend="jax", cache="static"))
POLL_S = 2.0


def enabled() -> bool:
    raw = os.environ.get("PLAYGROUND_WARMUP", "").strip().lower()
    if raw:
        return raw in ("1", "true", "yes")
    return bool(os.environ.get("SPACE_ID"))


def start(prompt: str = DEFAULT_PROMPT, specs: tuple[RunSpec, ...] = WARMUP_SPECS) -> threading.Thread | None:
    """Start the warm-up in a background thread when it is enabled (once); returns the thread."""
    if not enabled() or not LIVE_RUNS.claim_warmup():
        return None
    thread = threading.Thread(target=_run, args=(prompt, specs), name="warm-up", daemon=True)
    thread.start()
    return thread


def _run(prompt: str, specs: tuple[RunSpec, ...]) -> None:
    state = LIVE_RUNS.warmup
    began = time.perf_counter()
    try:
        for spec in specs:
            state.detail = "compiling the JAX decoder"
            for event in runner.run(prompt, spec):
                if isinstance(event, ProgressEvent) and event.fraction < 1.0:
                    state.detail = event.message
                elif isinstance(event, ProgressEvent):
                    state.detail = "compiling the JAX decoder"
        state.phase = "done"
    except Exception as exc:  # noqa: BLE001 - a failed warm-up only costs the first visitor the wait
        logger.warning("warm-up failed: %s", exc)
        state.phase, state.detail = "failed", str(exc)
    state.seconds = round(time.perf_counter() - began, 2)


def notice() -> str:
    """The page's line while the warm-up runs; empty otherwise."""
    state = LIVE_RUNS.warmup
    if state.phase != "running":
        return ""
    return (f"⏳ **Warming up** ({state.detail}): the default model is loading and the JAX decoder compiling, "
            "about 30 s after a restart. Runs started now begin when it is done.")


def status() -> dict[str, Any]:
    """The warm-up's phase, what it is doing and how long it took (an undocumented API for hosts and tests)."""
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

"""The served app: the page in Gradio's queue (one generation at a time) with the OpenAI-compatible API on the
same server. app.py (the Space's entry point) and `python -m playground serve` both start it from here."""

from __future__ import annotations

import gradio as gr

from playground.backends.prefix_store import budget_bytes
from playground.limits import queue_size
from playground.openai_api.routes import api_routes
from playground.ui.style import THEME, page_css
from playground.ui.wiring import build_ui


def build_app() -> gr.Blocks:
    """The page, queued: on 2 vCPUs parallel runs only slow each other and falsify timings; layout events run
    outside the queue (queue=False), so nobody's clicks wait behind a generation."""
    budget_bytes()  # a malformed PLAYGROUND_PREFIX_CACHE_MB is refused at start, not at the first run
    demo, _ = build_ui()  # builds components only: models load lazily on the first run, so startup takes seconds
    demo.queue(default_concurrency_limit=1, max_size=queue_size())
    return demo


def page_waiting(demo: gr.Blocks) -> int:
    """The page's events waiting in Gradio's queue (Gradio has no public accessor for its queue)."""
    queue = getattr(demo, "_queue", None)
    return len(queue) if queue is not None else 0


def launch(demo: gr.Blocks, server_name: str | None = None, server_port: int | None = None,
           block: bool = True) -> None:
    """Serve the page and, on the same FastAPI app, the OpenAI-compatible routes under /v1. Gradio builds its
    app at launch, so the routes go in through `app_kwargs` (FastAPI's `routes`). `block=False` returns once
    the server listens (a test that serves from its own process)."""
    demo.launch(css=page_css(), theme=THEME, server_name=server_name, server_port=server_port,
                prevent_thread_lock=not block, quiet=not block,
                app_kwargs={"routes": api_routes(lambda: page_waiting(demo))})

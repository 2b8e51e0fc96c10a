"""The `/sweep` endpoint: a sweep run in a worker thread, so the request can show it is alive and be stopped.

It yields null at most every HEARTBEAT_S while the sweep runs and the sweep's JSON object last (gradio_client's
predict returns the last). A client that goes away closes the generator: the sweep stops at the next token of
the run under way.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground.errors import PlaygroundError
from playground.sweep.run import run_sweep, sweep_from_json

HEARTBEAT_S = 10.0


def api_sweep(prompts: str, sweep: str) -> Iterator[dict[str, Any] | None]:
    """Run a sweep: `prompts` is a prompt set's name or one prompt per line, `sweep` a JSON object
    {"knob", "values", "spec", "seeds"}; returns the same JSON object as `python -m playground sweep --json`."""
    try:
        request = sweep_from_json(prompts, sweep)
        request.checked_specs()  # bad values and a sweep over its cap are refused before a thread starts
    except PlaygroundError as exc:
        raise gr.Error(str(exc)) from None
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = run_sweep(request, stop.is_set)
        except BaseException as exc:  # handed to the request's thread, which raises it
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="sweep", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(HEARTBEAT_S)
            if worker.is_alive():
                yield None
    finally:
        stop.set()  # a no-op once finished; a closed generator stops the sweep
        worker.join()
    error = outcome.get("error")
    if isinstance(error, PlaygroundError):
        raise gr.Error(str(error)) from None
    if error is not None:
        raise error
    yield outcome["result"]

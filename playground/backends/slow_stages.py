"""Saying so when a stage of a run takes a while: from the clock, not from a guess of what it will cost."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from playground.backends.base import ReportProgress

ANNOUNCE_AFTER_S = 2.0  # a stage still running after this long is announced while it runs


@contextmanager
def announced_if_slow(progress: ReportProgress | None, doing: str, done: str) -> Iterator[None]:
    """Within the block, `doing` is reported once it has run ANNOUNCE_AFTER_S seconds, and then `done` (with
    "{seconds}" filled in) when it ends; a quick block says nothing. Whether a build is cached (a built file, a
    directory shared between environments) is not asked: what the wait is, is."""
    if progress is None:
        yield
        return
    said = threading.Event()

    def announce() -> None:
        said.set()
        progress(0.0, doing)

    timer = threading.Timer(ANNOUNCE_AFTER_S, announce)
    timer.daemon = True
    start = time.perf_counter()
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if said.is_set():
            progress(1.0, done.format(seconds=time.perf_counter() - start))

"""The one generation slot of the process: one run generates at a time, and background work yields to visitors.

On 2 vCPUs two concurrent runs only slow each other and falsify both timings, and torch's global RNG makes seeds
reproducible only when runs do not interleave, so every run holds the slot while it generates. A plain Lock is
not fair: the warm-up, which runs many requests back to back, could take it again before a waiting visitor
does. The slot counts the runs waiting for it, and background work asks `wait_until_free()` before each piece,
so a visitor waits at most for the piece in progress.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from types import TracebackType

# The slot must have been free this long before background work takes it: a page run releases it between its
# columns for a moment, and the warm-up should not slip in there.
QUIET_S = 1.0


class GenerationSlot:
    """A lock (`with slot:`) that knows how many runs wait for it and when it was last released."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._waiting = 0
        self._released_at = 0.0

    def __enter__(self) -> GenerationSlot:
        with self._changed:
            self._waiting += 1
        try:
            self._lock.acquire()
        finally:
            with self._changed:
                self._waiting -= 1
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._lock.release()
        with self._changed:
            self._released_at = time.monotonic()
            self._changed.notify_all()

    def locked(self) -> bool:
        return self._lock.locked()

    def wait_until_free(self, quiet_s: float | None = None) -> None:
        """Block until no run holds or waits for the slot, and none has released it in the last `quiet_s`
        (default QUIET_S)."""
        quiet_s = QUIET_S if quiet_s is None else quiet_s
        with self._changed:
            while True:
                since = time.monotonic() - self._released_at
                if not self._waiting and not self._lock.locked() and since >= quiet_s:
                    return
                self._changed.wait(max(quiet_s - since, 0.05))


class LeftRunning:
    """Work a stopped run left running outside the slot (a JAX compile, which XLA cannot interrupt), with when it
    ran. It takes CPU from the runs that hold the slot meanwhile, so they report how long it overlapped them."""

    KEEP_S = 3600.0  # spans that ended longer ago than this are forgotten

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[list[float]] = []  # [start, end], end = inf while it runs

    def started(self) -> Callable[[], None]:
        """Record a piece of work running from now; call what this returns when it ends."""
        span = [time.monotonic(), math.inf]
        with self._lock:
            now = span[0]
            self._spans = [s for s in self._spans if s[1] > now - self.KEEP_S] + [span]

        def ended() -> None:
            with self._lock:
                span[1] = time.monotonic()
        return ended

    def running(self) -> int:
        with self._lock:
            return sum(1 for s in self._spans if s[1] == math.inf)

    def overlap_s(self, start: float, end: float) -> float:
        """Seconds of [start, end] (time.monotonic) during which some left-running work ran."""
        with self._lock:
            spans = sorted((max(s[0], start), min(s[1], end)) for s in self._spans)
        total, reach = 0.0, start
        for begin, finish in spans:
            begin = max(begin, reach)
            if finish > begin:
                total += finish - begin
                reach = finish
        return total


LEFT_RUNNING = LeftRunning()

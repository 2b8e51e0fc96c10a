"""The one generation slot of the process: one run generates at a time, short requests go before long work's next
piece, and whoever waits is told what holds the slot and for about how long.

On 2 vCPUs two concurrent runs only slow each other and falsify both timings, and torch's global RNG makes seeds
reproducible only when runs do not interleave, so every run holds the slot while it generates. A plain Lock is
neither fair nor able to say who holds it. Here each taker names itself (a `Holder`): long work (a Long context
measure, a sweep) holds the slot one piece at a time (a run, a chunk of positions) and, between pieces, lets every
short request that waits (a Step, a Run, an API completion) go first, so that one waits at most about one piece.
The slot times the pieces and the short holds, which is what its wait estimates rest on. Background work asks
`wait_until_free()` before each piece, so a visitor waits at most for the piece in progress.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import TypeVar

# The slot must have been free this long before background work takes it: a page run releases it between its
# columns for a moment, and the warm-up should not slip in there. Long work's next piece waits as long after a short
# request's release, for the same reason.
QUIET_S = 1.0
TICK_S = 1.0  # how often a waiter is told again how long it still waits
API_OWNER = "api"  # the owner of requests through the OpenAI-compatible API

Item = TypeVar("Item")
Waiting = Callable[[str], object]  # told what the slot waits for, again every TICK_S while it waits


@dataclass(eq=False)
class Holder:
    """Who holds or waits for the slot, in the words a waiting page shows ("waiting for a Long context run in
    another tab"): `what` it is, its `owner` (a page session's id, API_OWNER, or "" for this process's own work),
    and whether it `yields` (long work, held a piece at a time; it keeps its pieces' durations)."""

    what: str = "a run"
    owner: str = ""
    yields: bool = False
    pieces_s: deque[float] = field(default_factory=lambda: deque(maxlen=8))  # its latest pieces' wall times

    def where(self, asker: str) -> str:
        """Where this holder runs, seen from the owner `asker`."""
        if not self.owner:
            return ""
        if self.owner == API_OWNER:
            return " from the API"
        return " in this tab" if self.owner == asker else " in another tab"


def about(seconds: float) -> str:
    """A wait in round words: "about 40 s", "about 3 min"."""
    whole = max(1, math.ceil(seconds))
    return f"about {whole} s" if whole < 120 else f"about {math.ceil(whole / 60)} min"


class GenerationSlot:
    """A lock (`with slot:`, or `with slot.hold(holder):`) that knows who holds it, who waits, and how long its
    holders' pieces take."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._holder: Holder | None = None
        self._since = 0.0  # when the holder took the slot
        self._queue: list[Holder] = []  # the waiters, in arrival order
        self._released_at = 0.0
        self._short_released_at = 0.0
        self._short_s: deque[float] = deque(maxlen=20)  # the latest short holds' wall times

    def __enter__(self) -> GenerationSlot:
        self.acquire(Holder())
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()

    @contextmanager
    def hold(self, holder: Holder, waiting: Waiting | None = None,
             given_up: Callable[[], bool] | None = None) -> Iterator[bool]:
        """Hold the slot for one piece of `holder`'s work; `waiting` hears why it waits, while it waits. The block
        gets False, without the slot, when `given_up()` turns true before the slot is free (a Stop while waiting)."""
        held = self.acquire(holder, waiting, given_up)
        try:
            yield held
        finally:
            if held:
                self.release()

    def acquire(self, holder: Holder, waiting: Waiting | None = None,
                given_up: Callable[[], bool] | None = None) -> bool:
        """Take the slot (True), or give up waiting once `given_up()` says so (False)."""
        told = -math.inf
        with self._changed:
            self._queue.append(holder)
            try:
                while (pause := self._pause(holder)) > 0:
                    if given_up is not None and given_up():
                        self._changed.notify_all()  # whoever waited behind it may go now
                        return False
                    now = time.monotonic()
                    said = self._holder is not None or self._ahead_of(holder)
                    if waiting is not None and said and now - told >= TICK_S:
                        waiting(self._waiting_words(holder))
                        told = now
                    self._changed.wait(min(pause, TICK_S))
            finally:
                self._queue.remove(holder)
            self._holder, self._since = holder, time.monotonic()
            return True

    def release(self) -> None:
        with self._changed:
            holder, now = self._holder, time.monotonic()
            assert holder is not None, "released a generation slot nobody held"
            (holder.pieces_s if holder.yields else self._short_s).append(now - self._since)
            if not holder.yields:
                self._short_released_at = now
            self._holder, self._released_at = None, now
            self._changed.notify_all()

    def locked(self) -> bool:
        return self._holder is not None

    def wait_until_free(self, quiet_s: float | None = None) -> None:
        """Block until no run holds or waits for the slot, and none has released it in the last `quiet_s`
        (default QUIET_S)."""
        quiet_s = QUIET_S if quiet_s is None else quiet_s
        with self._changed:
            while True:
                since = time.monotonic() - self._released_at
                if not self._queue and self._holder is None and since >= quiet_s:
                    return
                self._changed.wait(max(quiet_s - since, 0.05))

    def wait_s(self, asker: Holder, also_ahead: int = 0) -> float | None:
        """About how long `asker`, asking now, waits for the slot: what the holder has left of its piece, then
        each waiter that goes first (and `also_ahead` more short requests); None while some of it has never been
        timed here."""
        with self._changed:
            return self._wait_s(asker, also_ahead)

    def waiting_words(self, asker: Holder) -> str:
        """What `asker` waits for, as the page says it: "waiting for a Long context run in another tab: about 40 s"."""
        with self._changed:
            return self._waiting_words(asker)

    def _pause(self, holder: Holder) -> float:
        """0 when `holder` (queued) may take the slot now; else how long to wait before asking again."""
        if self._holder is not None or self._first_in_line() is not holder:
            return TICK_S
        if holder.yields:  # a page run's next column comes right after its last: it goes first too
            return max(0.0, QUIET_S - (time.monotonic() - self._short_released_at))
        return 0.0

    def _first_in_line(self) -> Holder | None:
        line = [h for h in self._queue if not h.yields] or self._queue
        return line[0] if line else None

    def _ahead_of(self, asker: Holder) -> list[Holder]:
        """The waiters that take the slot before `asker`: short ones before long ones, each kind in arrival order."""
        line = [h for h in self._queue if not h.yields] + [h for h in self._queue if h.yields]
        return line[:line.index(asker)] if asker in line else [h for h in line if asker.yields or not h.yields]

    def _typical_s(self, holder: Holder) -> float | None:
        """How long one hold of `holder` takes: long work's latest piece (its pieces grow with the context it
        measures); a short request's median here."""
        if holder.yields:
            return holder.pieces_s[-1] if holder.pieces_s else None
        return statistics.median(self._short_s) if self._short_s else None

    def _left_s(self) -> float | None:
        """What the holder has left of its hold (at least a second while it still holds)."""
        if self._holder is None:
            return 0.0
        typical = self._typical_s(self._holder)
        return None if typical is None else max(1.0, typical - (time.monotonic() - self._since))

    def _wait_s(self, asker: Holder, also_ahead: int) -> float | None:
        parts = [self._left_s(), *(self._typical_s(h) for h in self._ahead_of(asker))]
        if also_ahead:
            short = statistics.median(self._short_s) if self._short_s else None
            parts.append(None if short is None else short * also_ahead)
        return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)

    def _waiting_words(self, asker: Holder) -> str:
        ahead = len(self._ahead_of(asker))
        queued = f", then {ahead} more request{'' if ahead == 1 else 's'} ahead" if ahead else ""
        holder = self._holder
        if holder is None:
            return f"waiting for {ahead} request{'' if ahead == 1 else 's'} ahead"
        wait = self._wait_s(asker, 0)
        if wait is None:  # its pieces have never been timed: say how long this one has run
            return (f"waiting for {holder.what}{holder.where(asker.owner)}{queued} (running for "
                    f"{time.monotonic() - self._since:.0f} s)")
        return f"waiting for {holder.what}{holder.where(asker.owner)}{queued}: {about(wait)}"


@contextmanager
def held_reporting(slot: GenerationSlot, holder: Holder, report: Callable[[float, str], object],
                   given_up: Callable[[], bool] | None = None) -> Iterator[bool]:
    """`slot.hold(...)` for a run that reports progress as (fraction, message): while it waits, what it waits for
    (at 0), and once it has waited, that the slot is free (at 1)."""
    waited = []

    def waiting(words: str) -> None:
        waited.append(words)
        report(0.0, words)

    with slot.hold(holder, waiting, given_up) as held:
        if waited and held:
            report(1.0, "the generation slot is free: running")
        yield held


def held_pieces(items: Iterator[Item], slot: GenerationSlot, holder: Holder,
                waiting: Waiting | None = None) -> Iterator[Item]:
    """`items`, each one computed while holding the slot as a piece of `holder`'s work (the slot is free between
    them, so short requests go in between)."""
    while True:
        with slot.hold(holder, waiting):
            try:
                item = next(items)
            except StopIteration:
                return
        yield item


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

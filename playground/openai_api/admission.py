"""Who may wait for the generation slot: API requests queue behind the page's, within the page's queue size, and
a request that would overflow it, or wait longer than PLAYGROUND_API_MAX_WAIT_SECONDS by the slot's estimate, is
refused at once with when to retry (429 + Retry-After)."""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from playground import runner
from playground.generation_slot import API_OWNER, GenerationSlot, Holder
from playground.limits import api_max_wait_seconds, queue_size
from playground.openai_api.errors import queue_full, wait_too_long

# before any API request has finished here, the retry hint assumes one short CPU run per waiting request
FIRST_GUESS_S = 10.0


class Admission:
    """Counts the API requests in flight; `page_waiting` says how many page events wait in Gradio's queue, and
    `slot` (the runner's) how long a request asking now would wait for it."""

    def __init__(self, page_waiting: Callable[[], int] = lambda: 0, slot: GenerationSlot | None = None) -> None:
        self.page_waiting = page_waiting
        self.slot = slot or runner.GENERATION_LOCK
        self._lock = threading.Lock()
        self._in_flight = 0
        self._took_s: deque[float] = deque(maxlen=20)  # the latest API requests' wall times

    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    @contextmanager
    def admitted(self) -> Iterator[None]:
        """Hold a place until the block ends, or raise ApiError 429 when the queue has no room or the wait for the
        generation slot would run past the limit. A wait the slot cannot estimate yet (nothing it waits for has
        been timed here) is let through."""
        with self._lock:
            waiting = self.page_waiting() + self._in_flight
            if waiting >= queue_size():
                raise queue_full(waiting, self._retry_after_s(waiting))
            asker = Holder(owner=API_OWNER)
            wait = self.slot.wait_s(asker, also_ahead=self.page_waiting())
            if wait is not None and wait > api_max_wait_seconds():
                raise wait_too_long(self.slot.waiting_words(asker), wait, api_max_wait_seconds())
            self._in_flight += 1
        began = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                self._took_s.append(time.monotonic() - began)

    def _retry_after_s(self, waiting: int) -> int:
        """The typical request's wall time, for each one ahead, from what this server measured."""
        typical = statistics.median(self._took_s) if self._took_s else FIRST_GUESS_S
        return max(1, math.ceil(typical * waiting))

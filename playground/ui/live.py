"""The one registry of live work in the server process: each session's stop request, and the warm-up's progress."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class WarmUpState:
    """Where the background warm-up is (see ui.warmup): written by its thread, read by the page's poll."""

    phase: str = "off"  # off | running | done | failed
    detail: str = ""
    seconds: float = 0.0
    done: int = 0  # requests warmed so far
    total: int = 0  # requests to warm


@dataclass
class LiveRuns:
    """What outlives one event and must be shared across events and threads. A run's stop cannot travel in a
    gr.State: Stop is pressed outside the queue while the run holds the session's values, so both must see the
    same flag, keyed by the session. Everything else a page knows lives in its components and gr.State."""

    stops: dict[str, threading.Event] = field(default_factory=dict)  # session hash -> stop requested
    warmup: WarmUpState = field(default_factory=WarmUpState)
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards starting the warm-up (once), and `busy`
    busy: dict[str, list[str]] = field(default_factory=dict)  # session hash -> what it runs now ("a run", "a step")

    @contextmanager
    def working(self, session: str, what: str) -> Iterator[None]:
        """Mark the session busy with `what` while the block runs (a step refuses to start meanwhile). A list per
        session: a run started during a step (it waits for the generation lock) keeps the session busy after the
        step ends."""
        with self.lock:
            self.busy.setdefault(session, []).append(what)
        try:
            yield
        finally:
            with self.lock:
                doing = self.busy.get(session, [])
                if what in doing:
                    doing.remove(what)
                if not doing:
                    self.busy.pop(session, None)

    def doing(self, session: str) -> str | None:
        """What the session runs now (the first of them), or None."""
        with self.lock:
            doing = self.busy.get(session)
            return doing[0] if doing else None

    def stop_flag(self, session: str) -> threading.Event:
        """The session's stop request (created clear on first use)."""
        return self.stops.setdefault(session, threading.Event())

    def forget(self, session: str) -> None:
        """A closed tab stops its run (if one is going) and its flag is dropped, so a long-lived Space does not
        collect one per visitor."""
        flag = self.stops.pop(session, None)
        if flag is not None:
            flag.set()

    def claim_warmup(self) -> bool:
        """Mark the warm-up as running unless it already ran or runs; True when the caller should start it."""
        with self.lock:
            if self.warmup.phase != "off":
                return False
            self.warmup.phase, self.warmup.detail = "running", "starting"
            return True


LIVE_RUNS = LiveRuns()  # the only module-level mutable state of playground.ui

"""Measurement shared by the runner and the tools: per-token latency, percentiles, peak resident memory."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import psutil


class PeakRss:
    """Samples a process's resident memory in the background; `peak` is the maximum seen while active.

    Sampling (not ru_maxrss) because the app lives long: the lifetime peak would hide this run's own.
    `pid`: another process (the load test watches the app it started), by default this one; `children`:
    add the resident memory of its child processes.
    """

    def __init__(self, interval_s: float = 0.005, pid: int | None = None, children: bool = False) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self._process = psutil.Process(pid)
        self._children = children
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def rss(self) -> int:
        """Resident bytes now (0 once the process is gone)."""
        try:
            own = self._process.memory_info().rss
            if not self._children:
                return int(own)
            return int(own + sum(c.memory_info().rss for c in self._process.children(recursive=True)))
        except psutil.Error:
            return 0

    def __enter__(self) -> PeakRss:
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())

    def _sample(self) -> None:
        while not self._done.wait(self.interval_s):
            self.peak = max(self.peak, self.rss())


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Arrivals:
    """When tokens reached the host, grouped by arrival: one token at a time on the PyTorch path, a chunk per
    call on the JAX path, accepted drafts plus one in assisted decoding. The first arrival (the prompt's
    answer) is TTFT's; the rest are decode latencies, reported per arrival, never split into invented
    per-token times."""

    ends: list[int]  # tokens received so far at each arrival after the first
    ms_per_token: list[float]  # each of those arrivals' interval divided by its tokens
    tokens: int  # tokens after the first arrival
    seconds: float  # from the first arrival to the last


def arrivals(token_times: list[float]) -> Arrivals:
    """Group equal timestamps (tokens delivered together) into arrivals."""
    groups: list[tuple[float, int]] = []
    for t in token_times:
        if groups and groups[-1][0] == t:
            groups[-1] = (t, groups[-1][1] + 1)
        else:
            groups.append((t, 1))
    ends, per_token, received = [], [], groups[0][1] if groups else 0
    for (previous, _), (current, count) in zip(groups, groups[1:], strict=False):
        received += count
        ends.append(received)
        per_token.append(1000.0 * (current - previous) / count)
    first = groups[0][1] if groups else 0
    span = groups[-1][0] - groups[0][0] if groups else 0.0
    return Arrivals(ends, per_token, len(token_times) - first, span)

"""Timing and memory measurement shared by both backends: per-token latency, throughput, peak RSS."""

from __future__ import annotations

import threading
import time
from typing import Any

import psutil

from playground.events import GenerationOutput


class PeakRss:
    """Samples this process's resident memory in the background; `peak` is the maximum seen while active.

    Sampling (not ru_maxrss) because the app lives long: the lifetime peak would hide this run's own.
    """

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self._process = psutil.Process()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        self.peak = self._process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)

    def _sample(self) -> None:
        while not self._done.wait(self.interval_s):
            self.peak = max(self.peak, self._process.memory_info().rss)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def per_token_latencies(token_times: list[float]) -> list[float]:
    """Seconds per decoded token, after the first emission (which is prefill, reported as TTFT).

    Tokens that arrive together (the JAX path emits chunks) share their chunk's interval evenly,
    so a chunk of 8 tokens that took 80 ms counts as 8 tokens of 10 ms, not one of 80 and seven of 0.
    """
    groups: list[tuple[float, int]] = []
    for t in token_times:
        if groups and groups[-1][0] == t:
            groups[-1] = (t, groups[-1][1] + 1)
        else:
            groups.append((t, 1))
    latencies: list[float] = []
    for (previous, _), (current, count) in zip(groups, groups[1:], strict=False):
        latencies.extend([(current - previous) / count] * count)
    return latencies


def summarize(output: GenerationOutput, end_time: float, load_s: float) -> dict[str, Any]:
    """The Result JSON's metrics block; None where a figure does not exist for this run (e.g. TTFT of beam)."""
    times = output.token_times
    new_tokens = len(output.sequences[0]) if output.sequences else 0
    total_s = end_time - output.start_time
    latencies = per_token_latencies(times)
    if latencies:
        tokens_per_s = len(latencies) / sum(latencies) if sum(latencies) > 0 else None
    elif new_tokens and total_s > 0:
        tokens_per_s = new_tokens / total_s  # no per-token times (beam search): whole-run rate
    else:
        tokens_per_s = None
    p50, p90 = percentile(latencies, 50), percentile(latencies, 90)
    return {
        "load_s": round(load_s, 4),
        "compile_s": round(output.compile_s, 4),
        "ttft_s": round(times[0] - output.start_time, 4) if times else None,
        "total_s": round(total_s, 4),
        "tokens_per_s": round(tokens_per_s, 3) if tokens_per_s else None,
        "ms_per_token_p50": round(p50 * 1000, 3) if p50 is not None else None,
        "ms_per_token_p90": round(p90 * 1000, 3) if p90 is not None else None,
        "kv_cache_bytes": int(output.kv_cache_bytes),
        "peak_rss_bytes": None,  # filled by the runner, which owns the sampler
        "acceptance_rate": output.acceptance_rate,
    }


def now() -> float:
    return time.perf_counter()

"""Measurement shared by the runner and the tools: per-token latency, percentiles, peak resident memory, the
machine's read bandwidth, and whether the machine was busy with other work while a run ran."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


# Whether a timing was taken on a busy machine: the CPU time other processes used (and the hypervisor stole)
# while a run ran, so a table that mixes a quiet run with a contended one says which is which.
#
# Read from /proc/stat (every process's CPU time, in clock ticks, summed over the CPUs) and this process's own
# CPU time (os.times): what the machine spent beyond this process was spent on other work, and each second of
# it was a second the run could not have.
# Other work above this share of the machine's CPU time marks a run's figures as taken on a busy machine: on
# two cores that is half a core, enough to slow a decode that uses both by a quarter
BUSY_SHARE = 0.25
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuSample:
    """One reading: wall time, the machine's busy and stolen CPU seconds, this process's CPU seconds."""

    wall_s: float
    busy_s: float  # user + nice + system + irq + softirq, over every CPU
    steal_s: float
    own_s: float
    cpus: int


def read_stat(path: Path = Path("/proc/stat")) -> tuple[float, float, int] | None:
    """(busy seconds, stolen seconds, CPU count) from a /proc/stat text; None where there is no such file."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    total = next((line.split() for line in lines if line.startswith("cpu ")), None)
    if total is None:
        return None
    ticks = [int(x) for x in total[1:]] + [0] * 8  # user nice system idle iowait irq softirq steal ...
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return (user + nice + system + irq + softirq) * _TICK_S, steal * _TICK_S, max(cpus, 1)


def cpu_sample(path: Path = Path("/proc/stat")) -> CpuSample | None:
    stat = read_stat(path)
    if stat is None:
        return None
    own = os.times()
    return CpuSample(time.monotonic(), stat[0], stat[1], own.user + own.system, stat[2])


def machine_load(start: CpuSample | None, end: CpuSample | None) -> dict[str, Any] | None:
    """What other work took between two samples, as shares of the machine's CPU time; None when unmeasured."""
    if start is None or end is None or end.wall_s - start.wall_s <= 0:
        return None
    capacity = (end.wall_s - start.wall_s) * end.cpus
    others = max(0.0, (end.busy_s - start.busy_s) - (end.own_s - start.own_s)) / capacity
    stolen = max(0.0, end.steal_s - start.steal_s) / capacity
    return {"other_cpu_share": round(others, 3), "steal_share": round(stolen, 3), "cpus": end.cpus,
            "busy": others + stolen > BUSY_SHARE}


def busy_warning(who: str) -> str:
    """The page's line for runs (`who`: "Columns 1, 2") whose timings were taken on a busy machine."""
    return (f"⚠ {who} ran on a busy machine (other work took CPU time): compare their timings after a repeat on a "
            "quiet one.")


def busy_note(load: dict[str, Any] | None) -> str:
    """One line for a run whose figures were taken on a busy machine; '' for a quiet (or unmeasured) one."""
    if not load or not load.get("busy"):
        return ""
    share = 100 * (load["other_cpu_share"] + load["steal_share"])
    reason = f"other work took {share:.0f}% of the {load['cpus']} CPUs during this run"
    seconds = load.get("left_running_s")
    if seconds:  # this process's own CPU time, so not in other_cpu_share
        span = f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1000:.1f} ms"
        reason = f"a JAX compile that a stopped run left running shared the CPUs for {span}"
    return (f"busy machine: {reason}, so its timings are slower than this machine can do; run it again (or repeat "
            "the timing) when it is quiet")


BANDWIDTH_BYTES = 1 << 30  # a 1 GiB array: far beyond any cache, so the sum streams from memory


class BandwidthProbe:
    """Read bandwidth in GB/s from jitted sums over a 1 GiB fp32 array, sampled before every timed run.

    On a shared machine the bandwidth drifts by tens of percent within a minute, so a decode rate is only
    comparable with the bandwidth of its own moment: the benchmark reports medians of both.
    """

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp

        self._data = jnp.ones((BANDWIDTH_BYTES // 4,), jnp.float32)
        self._sum = jax.jit(jnp.sum)
        self._sum(self._data).block_until_ready()  # compile and fault the pages in
        self.samples: list[float] = []

    def sample(self, repeats: int = 3) -> float:
        """Best of `repeats` sums (the sum itself is noise-free; a slow repeat was interrupted)."""
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            self._sum(self._data).block_until_ready()
            best = min(best, time.perf_counter() - start)
        self.samples.append(BANDWIDTH_BYTES / best / 1e9)
        return self.samples[-1]

    def close(self) -> None:
        del self._data  # 1 GiB: not kept past the benchmark


def rates(start: float, times: list[float]) -> tuple[float | None, float | None]:
    """(tokens_per_s over the tokens after the first, ttft_s)."""
    if not times:
        return None, None
    ttft = times[0] - start
    span = times[-1] - times[0]
    return ((len(times) - 1) / span if len(times) > 1 and span > 0 else None), ttft

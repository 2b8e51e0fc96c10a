"""Whether a timing was taken on a busy machine: the CPU time other processes used (and the hypervisor stole)
while a run ran, so a table that mixes a quiet run with a contended one says which is which.

Read from /proc/stat (every process's CPU time, in clock ticks, summed over the CPUs) and this process's own
CPU time (os.times): what the machine spent beyond this process was spent on other work, and each second of
it was a second the run could not have.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def sample(path: Path = Path("/proc/stat")) -> CpuSample | None:
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


def busy_note(load: dict[str, Any] | None) -> str:
    """One line for a run whose figures were taken on a busy machine; '' for a quiet (or unmeasured) one."""
    if not load or not load.get("busy"):
        return ""
    share = 100 * (load["other_cpu_share"] + load["steal_share"])
    return (f"busy machine: other work took {share:.0f}% of the {load['cpus']} CPUs during this run, so its "
            "timings are slower than this machine can do; run it again (or repeat the timing) when it is quiet")

"""What this host lets the process use: memory and CPUs from cgroup limits, CPU affinity and physical RAM.

Inside a container `psutil.virtual_memory().total` and `os.cpu_count()` report the host machine, not the
container's share of it: a free Space (2 vCPU, 16 GB) on a large host would see the host's RAM and cores,
budget models for memory it cannot have and start a thread per host core. The container's real limits sit
in its cgroup: v2 `memory.max` and `cpu.max`, v1 `memory.limit_in_bytes` and `cpu.cfs_quota_us` /
`cpu.cfs_period_us`. The smallest limit on the process's cgroup or any of its ancestors applies.

PLAYGROUND_CGROUP_ROOT (default /sys/fs/cgroup) points the readers elsewhere, so tests can fake a cgroup tree.
This module never imports torch or jax: thread counts are set through environment variables, which the
libraries read when they start their thread pools.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import psutil

UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1
# read by OpenMP (torch's intra-op pool), MKL, OpenBLAS, and XLA's CPU client (PJRT_NPROC sizes its pool)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PJRT_NPROC")


@dataclass(frozen=True)
class Limits:
    """The memory and CPUs this process may use, and where each figure came from."""

    memory_bytes: int
    cpus: int
    memory_source: str  # "cgroup" or "physical RAM"
    cpu_source: str  # "cgroup", "affinity" or "cpu count"


def cgroup_root() -> Path:
    return Path(os.environ.get("PLAYGROUND_CGROUP_ROOT", "/sys/fs/cgroup"))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def own_cgroups(proc_file: Path = Path("/proc/self/cgroup")) -> dict[str, str]:
    """Controller ("" for v2's unified tree) -> this process's cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    for line in (_read(proc_file) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def _lineage(base: Path, relative: str) -> list[Path]:
    """The process's cgroup folder and its ancestors up to `base`, that exist. With a cgroup namespace (or a
    container that mounts only its own subtree) the recorded path is not under `base`: then `base` alone."""
    folder = base / relative.strip("/")
    if not folder.is_dir():
        return [base] if base.is_dir() else []
    chain = [folder]
    while chain[-1] != base and base in chain[-1].parents:
        chain.append(chain[-1].parent)
    return chain


def _first_number(text: str | None) -> int | None:
    if text is None or not text.split():
        return None
    word = text.split()[0]
    return int(word) if word.lstrip("-").isdigit() else None  # "max" (v2) means no limit


def memory_limit(root: Path | None = None, own: dict[str, str] | None = None) -> int | None:
    """The smallest cgroup memory limit over the process's cgroup and its ancestors (None: unlimited)."""
    root = cgroup_root() if root is None else root
    own = own_cgroups() if own is None else own
    if (root / "cgroup.controllers").exists():  # v2: one unified tree
        folders, name = _lineage(root, own.get("", "/")), "memory.max"
    else:
        folders, name = _lineage(root / "memory", own.get("memory", "/")), "memory.limit_in_bytes"
    limits = [n for n in (_first_number(_read(f / name)) for f in folders) if n is not None and 0 < n < UNLIMITED]
    return min(limits) if limits else None


def _v1_quota(folder: Path) -> float | None:
    quota = _first_number(_read(folder / "cpu.cfs_quota_us"))
    period = _first_number(_read(folder / "cpu.cfs_period_us"))
    return quota / period if quota and quota > 0 and period else None


def _v2_quota(folder: Path) -> float | None:
    words = (_read(folder / "cpu.max") or "").split()
    if len(words) != 2 or not words[0].isdigit() or not words[1].isdigit() or int(words[1]) == 0:
        return None  # "max 100000": no quota
    return int(words[0]) / int(words[1])


def cpu_limit(root: Path | None = None, own: dict[str, str] | None = None) -> float | None:
    """The smallest CPU quota (in CPUs, may be fractional) over the process's cgroup and its ancestors."""
    root = cgroup_root() if root is None else root
    own = own_cgroups() if own is None else own
    if (root / "cgroup.controllers").exists():
        quotas = [_v2_quota(f) for f in _lineage(root, own.get("", "/"))]
    else:
        v1 = next((root / n for n in ("cpu", "cpu,cpuacct", "cpuacct,cpu") if (root / n).is_dir()), root / "cpu")
        quotas = [_v1_quota(f) for f in _lineage(v1, own.get("cpu", "/"))]
    known = [q for q in quotas if q is not None]
    return min(known) if known else None


def affinity_cpus() -> int | None:
    """CPUs this process may be scheduled on (a cpuset or taskset narrows it); None where unsupported."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def detect(root: Path | None = None, own: dict[str, str] | None = None) -> Limits:
    """The smallest of the cgroup limits, the CPU affinity and the physical machine."""
    physical = psutil.virtual_memory().total
    memory = memory_limit(root, own)
    memory_bytes, memory_source = (memory, "cgroup") if memory is not None and memory < physical else (
        physical, "physical RAM")
    candidates: list[tuple[int, str]] = [(os.cpu_count() or 1, "cpu count")]
    affinity = affinity_cpus()
    if affinity:
        candidates.append((affinity, "affinity"))
    quota = cpu_limit(root, own)
    if quota is not None:
        # rounded down: threads beyond the quota only wait out CFS throttling, and stall the others with them
        candidates.append((max(1, math.floor(quota)), "cgroup"))
    cpus, cpu_source = min(candidates, key=lambda c: c[0])
    return Limits(memory_bytes, cpus, memory_source, cpu_source)


@lru_cache(maxsize=1)
def limits() -> Limits:
    """This process's limits, read once."""
    return detect()


def apply_thread_limits(cpus: int | None = None) -> int:
    """Size torch's and XLA's thread pools to the CPUs this process may use; call before importing them.

    Variables the user already set are left alone. If torch is already imported (its pool is started), its
    intra-op thread count is set directly as well. Returns the thread count.
    """
    threads = limits().cpus if cpus is None else cpus
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(threads))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    return threads

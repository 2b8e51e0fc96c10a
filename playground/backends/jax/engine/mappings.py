"""The process's memory mappings, against the kernel's limit on them.

XLA's CPU client gives every compiled kernel its own pages for code and data, about three memory mappings per
kernel: a SmolLM2 request of a new kind (its prefill, first step and decode chunks) adds 800-1,500. Linux
refuses a process more than `vm.max_map_count` mappings (65,530 by default), however much memory is free, and
past that LLVM cannot place the next program ("LLVM compilation error: Cannot allocate memory") and the process
dies of a segmentation fault. So the program cache (program_cache.py) drops programs while the process is near
that limit, as it does past its byte bound.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

LIMIT_FILE = Path("/proc/sys/vm/max_map_count")
MAPS_FILE = Path("/proc/self/maps")
# the share of the limit past which programs are dropped: what one more request's programs need (a few thousand
# mappings) and what the rest of the process maps (libraries, threads, torch's allocations) fit in the rest
CROWDED_SHARE = 0.75


@cache
def mapping_limit() -> int | None:
    """The most memory mappings the kernel lets a process hold (None where it does not say: not Linux)."""
    try:
        return int(LIMIT_FILE.read_text())
    except (OSError, ValueError):
        return None


def mappings_in_use() -> int | None:
    """The memory mappings this process holds now (None where the system does not list them)."""
    try:
        return MAPS_FILE.read_bytes().count(b"\n")
    except OSError:
        return None


def mappings_crowded(share: float = CROWDED_SHARE) -> bool:
    """Whether the process holds more than `share` of the mappings it may."""
    limit, in_use = mapping_limit(), mappings_in_use()
    return limit is not None and in_use is not None and in_use > share * limit

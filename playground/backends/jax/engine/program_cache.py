"""The compiled programs of one engine, kept while they fit a byte bound, the least recently used dropped first.

A server sees a new program for every new shape and setting (cache layout, length, sampling mode, draft
width), and each stays in the process until dropped: unbounded, a public deployment with varied visitors
grows until it is killed. Programs are also dropped while the process holds most of the memory mappings Linux
allows it (mappings.py): each compiled kernel maps pages of its own, and past the limit the next compile kills
the process. A dropped program is rebuilt from JAX's on-disk compilation cache (a load, not a
compile) when a request needs it again; a request holds the programs it fetched, so a drop never touches a
running request.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from playground.backends.jax.engine.mappings import mappings_crowded
from playground.models.memory import parse_size

# sized for a 16 GB Space: the two bundled models and their engines take ~4 GiB, and a request's programs
# (prefill, first step, a decode chunk per cache length) cost ~50-100 MiB on SmolLM2
DEFAULT_BOUND = "1G"
# a loaded program costs the process about this many times its serialized executable: SmolLM2's programs for
# 21 varied requests (31 programs, 73 MiB serialized) held 1297 MiB of RSS, all of it returned once they
# were dropped; new programs added 14-27x their serialized size per request kind
RSS_PER_SERIALIZED_BYTE = 16


def program_cache_bound() -> int:
    """PLAYGROUND_PROGRAM_CACHE (bytes, or with a K/M/G suffix): compiled programs kept per model."""
    return parse_size("PLAYGROUND_PROGRAM_CACHE", os.environ.get("PLAYGROUND_PROGRAM_CACHE", DEFAULT_BOUND))


def program_bytes(compiled: Any) -> int:
    """What a compiled program costs the process: its executable's serialized size, scaled by the measured
    ratio (XLA's CPU client reports no generated-code size)."""
    return int(len(compiled.runtime_executable().serialize()) * RSS_PER_SERIALIZED_BYTE)


def _return_freed_memory() -> None:
    """glibc keeps freed blocks in its arenas; hand them back so the process's RSS shows the drop."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


class ProgramCache:
    """Compiled programs by key, least recently used first, with their bytes; `add` drops the oldest programs
    past the bound, or while the process's memory mappings are crowded (never the one just added)."""

    def __init__(self, bound: int, size: Callable[[Any], int] | None = None,
                 crowded: Callable[[], bool] | None = None) -> None:
        self.bound = bound
        self._size = size or program_bytes  # both looked up now, not when the class was defined
        self._crowded = crowded or mappings_crowded
        self._programs: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._programs)

    @property
    def bytes(self) -> int:
        """Bytes the kept programs cost the process."""
        return sum(size for _, size in list(self._programs.values()))

    def lookup(self, key: Hashable) -> Any | None:
        """The program for `key` if kept (now the most recently used), else None."""
        with self._lock:
            entry = self._programs.get(key)
            if entry is None:
                return None
            self._programs.move_to_end(key)
            return entry[0]

    def add(self, key: Hashable, program: Any) -> None:
        """Keep a newly built program, dropping the least recently used ones while the total is past the bound."""
        size = self._size(program)
        with self._lock:
            self._programs[key] = (program, size)
            self._programs.move_to_end(key)
            dropped = 0
            # a dropped program's mappings go with it (the cache holds the only reference, unless a running
            # request fetched it), so crowding is measured again after each drop
            while len(self._programs) > 1 and (self.bytes > self.bound or self._crowded()):
                self._programs.popitem(last=False)
                dropped += 1
            self.evictions += dropped
        if dropped:
            _return_freed_memory()

    def clear(self) -> None:
        with self._lock:
            self._programs.clear()
        _return_freed_memory()

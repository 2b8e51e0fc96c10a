"""One XLA compile per distinct program in a test process.

Most unit tests make their own tiny model, so each gets its own engine, which compiles its own programs; many of
those programs are the same from test to test (the same config, cache and strategy, and the weights are
arguments, not constants). JAX's persistent compilation cache would share them, but the test process keeps it
off (tests/conftest.py), so this keeps recent executables in memory, keyed by what that cache keys them by: the
lowered module, the compile options and the arguments' types. The engine above it sees every build as before
(its program cache, its compile notices and counts); only XLA's compile of a program it has already made is
skipped. In one process the unit tests built 696 programs, 315 of them repeats, which took 109 s of XLA's 290 s;
`scripts/test.sh --fast` took 110 s of pytest instead of 137 s (AMD EPYC, 2 cores).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import pytest
from jax.stages import Compiled, CompilerOptions, Lowered

from playground.backends.jax import program_cache
from playground.backends.jax.mappings import mappings_crowded

COMPILE = Lowered.compile  # JAX's own, for a test that needs its executable not kept
_PROGRAM_BYTES = program_cache.program_bytes

# the executables kept, the least recently used dropped past this many: more than a test process compiles (the
# unit tests' 696 builds in one process were 381 programs). Tiny models' programs are small: 230 of them kept
# raised the peak RSS of a run of tests/unit/test_jax_caches.py and test_jax_assisted.py by 105 MiB.
KEPT = 1024
# Each kept executable holds its kernels' memory mappings (mappings.py: about three per kernel) after the tests
# that made it are gone: a worker of the fast lane ended with 19,400 mappings, 99 executables kept. Linux allows
# a process 65,530, and past them the next compile kills it (a CI worker died so, with bundled models' programs
# beside the store's). So the store gives way first: past this share of the limit, it drops its older half.
CROWDED_SHARE = 0.3


def crowded() -> bool:
    """Whether the process holds more mappings than the store leaves room for."""
    return mappings_crowded(CROWDED_SHARE)


class SharedCompiles:
    """Compiled executables by lowered program, the most recently used last."""

    def __init__(self, kept: int = KEPT, crowded: Callable[[], bool] = crowded) -> None:
        self.kept = kept
        self._crowded = crowded
        self.hits = 0
        self._executables: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
        # what program_bytes said of each kept executable, by its identity: measured when it was compiled,
        # since an executable with a sort no longer serializes once it has run
        self._bytes: dict[int, int] = {}
        self._lock = threading.Lock()

    def compile(self, lowered: Lowered, compiler_options: CompilerOptions | None = None, **kwargs: Any) -> Compiled:
        """`Lowered.compile`, reusing the executable of an identical program compiled before in this process."""
        if kwargs or lowered._lowering.const_args or jax.device_count() != 1:  # placed or holding constants
            return COMPILE(lowered, compiler_options, **kwargs)
        key = (lowered.as_text(), repr(sorted((compiler_options or {}).items())), str(lowered.in_tree),
               str(lowered.out_tree),
               tuple((arg.shape, str(arg.dtype), arg.donated) for arg in jax.tree.leaves(lowered.args_info)))
        with self._lock:
            kept = self._executables.get(key)
            if kept is not None:
                self._executables.move_to_end(key)
                self.hits += 1
        if kept is None:
            compiled = COMPILE(lowered, compiler_options)
            kept = (compiled._executable, _PROGRAM_BYTES(compiled))
            crowded = self._crowded()
            with self._lock:
                self._executables[key] = kept
                self._bytes[id(kept[0])] = kept[1]
                older_half = len(self._executables) // 2 if crowded else 0
                for _ in range(max(older_half, len(self._executables) - self.kept)):
                    self._bytes.pop(id(self._executables.popitem(last=False)[1][0]), None)
            return compiled
        # a new wrapper for this lowering's own arguments and outputs, around the executable already made
        return Compiled(kept[0], lowered._lowering.const_args, lowered.args_info, lowered.out_tree,
                        lowered._no_kwargs, lowered._in_types, lowered._out_types)

    def program_bytes(self, compiled: Any) -> int:
        """program_cache.program_bytes, as measured when the executable was compiled if it is a kept one."""
        with self._lock:
            known = self._bytes.get(id(getattr(compiled, "_executable", None)))
        return known if known is not None else _PROGRAM_BYTES(compiled)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Route the test's compiles, and its engines' program sizes, through this store."""
        def compile(lowered: Lowered, compiler_options: CompilerOptions | None = None, **kwargs: Any) -> Compiled:
            return self.compile(lowered, compiler_options, **kwargs)

        monkeypatch.setattr(Lowered, "compile", compile)
        monkeypatch.setattr(program_cache, "program_bytes", self.program_bytes)


SHARED = SharedCompiles()

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

from playground.backends.jax.engine import program_cache
from playground.backends.jax.engine.mappings import mappings_in_use

COMPILE = Lowered.compile  # JAX's own, for a test that needs its executable not kept
_PROGRAM_BYTES = program_cache.program_bytes

# the executables kept, the least recently used dropped past this many: more than a test process compiles (the
# unit tests' 696 builds in one process were 381 programs). Tiny models' programs are small: 230 of them kept
# raised the peak RSS of a run of tests/unit/test_jax_caches.py and test_jax_assisted.py by 105 MiB.
KEPT = 1024
# ... and past this many memory mappings held by them. A kept executable holds its kernels' mappings (about
# three per kernel, playground/backends/jax/engine/mappings.py) after the tests that made it are gone, and Linux allows
# a process 65,530: past them the next compile kills it. A CI worker died so, with the bundled models' engines
# beside the store (a worker of the full suite holds up to 36,400 mappings without it), and a worker of the fast
# lane held 19,400 with 99 executables kept. The bundled models' engines drop programs past 75% of the limit
# (program_cache.py), so this leaves them room and the process margin.
MAPPINGS_KEPT = 10_000


class SharedCompiles:
    """Compiled executables by lowered program, the most recently used last."""

    def __init__(self, kept: int = KEPT, mappings_kept: int = MAPPINGS_KEPT,
                 mappings: Callable[[], int | None] = mappings_in_use) -> None:
        self.kept = kept
        self.mappings_kept = mappings_kept
        self._mappings = mappings
        self.hits = 0
        # each kept executable, and the memory mappings its compile added
        self._executables: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
        self.mappings_held = 0
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
            before = self._mappings()
            compiled = COMPILE(lowered, compiler_options)
            after = self._mappings()
            # another thread's compile may land in between: counted here too, which errs on the safe side
            held = max(after - before, 0) if before is not None and after is not None else 0
            size = _PROGRAM_BYTES(compiled)
            with self._lock:
                self._executables[key] = (compiled._executable, held)
                self._bytes[id(compiled._executable)] = size
                self.mappings_held += held
                while len(self._executables) > 1 and (len(self._executables) > self.kept
                                                      or self.mappings_held > self.mappings_kept):
                    executable, its_mappings = self._executables.popitem(last=False)[1]
                    self._bytes.pop(id(executable), None)
                    self.mappings_held -= its_mappings
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

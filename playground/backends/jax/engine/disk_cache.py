"""JAX's persistent compilation cache under $PLAYGROUND_CACHE/jax: a restarted process, or a program dropped from
memory, loads its compiled programs instead of compiling them again.

A program's disk key is a hash of its lowered module, so a program traced the same way in two processes must
lower to the same text: nothing drawn per process (a seed, an object id) may end up in it as a constant. The
engine makes torchax's per-thread PRNG key before tracing for that reason.
"""

from __future__ import annotations

import os

import jax

from playground.models.paths import cache_root

_enabled = False


def wanted() -> bool:
    """PLAYGROUND_COMPILE_CACHE=0 keeps compiled programs in memory only (a process that compiles hundreds of
    throwaway programs, like the test suite, gains nothing from writing and re-reading them)."""
    return os.environ.get("PLAYGROUND_COMPILE_CACHE", "1") != "0"


def enable() -> None:
    """Point JAX's compilation cache at $PLAYGROUND_CACHE/jax (once per process), thresholds at zero so small
    programs are kept too."""
    global _enabled
    if _enabled or not wanted():
        return
    path = cache_root() / "jax"
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    _enabled = True

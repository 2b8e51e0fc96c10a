"""JAX's persistent compilation cache under $PLAYGROUND_CACHE/jax: a restarted process, or a program dropped from
memory, loads its compiled programs instead of compiling them again.

PLAYGROUND_COMPILE_CACHE chooses which programs are written:
- `1` (the default): every program, however quick its compile;
- `0`: none (compiled programs stay in memory only);
- a duration such as `2s`: only programs whose compile took at least that long. A process that compiles many
  quick throwaway programs beside a few costly ones (the test suite: random tiny models beside the bundled
  ones) keeps the costly ones and writes nothing for the rest.
"""

from __future__ import annotations

import os
import re

import jax

from playground.errors import PlaygroundError
from playground.models.paths import cache_root

_DURATION = re.compile(r"(\d+(?:\.\d+)?)s")
_enabled = False


def min_compile_s() -> float | None:
    """The shortest compile whose program is written to disk; None when nothing is."""
    value = os.environ.get("PLAYGROUND_COMPILE_CACHE", "1").strip()
    if value in ("0", "1"):
        return None if value == "0" else 0.0
    duration = _DURATION.fullmatch(value)
    if duration is None:
        raise PlaygroundError(f"PLAYGROUND_COMPILE_CACHE={value!r}: use 1 (every program), 0 (none), or a "
                              f"duration such as 2s (programs that took at least that long to compile)")
    return float(duration.group(1))


def wanted() -> bool:
    """Whether compiled programs go to disk at all."""
    return min_compile_s() is not None


def enable() -> None:
    """Point JAX's compilation cache at $PLAYGROUND_CACHE/jax (once per process), with the size threshold at
    zero so small programs are kept too."""
    global _enabled
    threshold = min_compile_s()
    if _enabled or threshold is None:
        return
    path = cache_root() / "jax"
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", threshold)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    _enabled = True

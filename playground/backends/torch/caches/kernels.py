"""The 2- and 4-bit quantized cache's CPU kernels, built before a run rather than inside it.

transformers' QuantizedCache packs tokens with quanto, whose `unpack` runs a C++ extension that quanto builds with
ninja the first time it is called in an environment (a fresh install, a restarted Space): about a minute on two
cores. Left to itself that happens at the cache's first pack, in the middle of the timed run, as a minute-long
stall after the first tokens. Built here first, it is reported apart, as the JAX path reports its compiles.
"""

from __future__ import annotations

import time

from playground.backends.base import ReportProgress
from playground.backends.slow_stages import announced_if_slow
from playground.spec import RunSpec

PACKED_BITS = (2, 4)  # quanto's packed layouts; 8 bits is fp8, which needs no extension
BUILD_NOTE = "building quanto's CPU kernels for the quantized cache (once per environment: about a minute)"


def prepare_quanto(spec: RunSpec, progress: ReportProgress | None = None) -> float:
    """The quantized cache's preparation (registry: torch_prepare): seconds spent building (or loading) quanto's
    extension for this run's bits; 0 for 8 bits. `progress` hears of it whenever it takes a while: a first
    build, a rebuild, or a build directory another environment is using."""
    if spec.cache_bits not in PACKED_BITS:
        return 0.0
    from optimum.quanto.library.extensions import get_extension

    extension = get_extension("quanto_cpp")
    start = time.perf_counter()
    with announced_if_slow(progress, BUILD_NOTE, "built quanto's CPU kernels in {seconds:.0f} s"):
        _ = extension.lib  # builds on first use, then loads; later calls return the loaded library
    return time.perf_counter() - start

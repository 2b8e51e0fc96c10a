"""The 2- and 4-bit quantized cache's kernels, built before a run rather than inside it.

transformers' QuantizedCache packs tokens with quanto, whose `unpack` runs an extension that quanto builds with
ninja the first time it is called in an environment (a fresh install, a restarted Space): its C++ kernels for
tensors on a CPU (minutes on two cores), its CUDA kernels for tensors on a GPU (nvcc, longer).
Left to itself that happens at the cache's first pack, in the middle of the timed run, as a stall after the first
tokens. Built here first, for the device the cache's tensors live on, it is reported apart, as the JAX path
reports its compiles.
"""

from __future__ import annotations

import time

from playground import device
from playground.backends.base import ReportProgress
from playground.backends.slow_stages import announced_if_slow
from playground.registry.kv_store import PACKED_BITS, kv_bits
from playground.spec import RunSpec

# device kind -> quanto's extension that unpacks tensors there, and what the page calls it
EXTENSIONS = {"cpu": ("quanto_cpp", "CPU"), "cuda": ("quanto_cuda", "CUDA")}


def build_note(kind: str) -> str:
    """What the column says while the kernels for a device kind build. No duration is promised: a build took 146 s
    on two cores where a minute had been said; the page adds the seconds it has taken so far as it goes."""
    return f"building quanto's {EXTENSIONS[kind][1]} kernels for the quantized cache (once per environment)"


BUILD_NOTE = build_note("cpu")


def build_kernels(kind: str, progress: ReportProgress | None = None) -> float:
    """Seconds spent building (or loading) quanto's extension for a device kind; scripts/device-check.sh calls it
    before the tests, so that parallel test processes do not each wait on one build inside a timed test."""
    from optimum.quanto.library.extensions import get_extension

    name, shown = EXTENSIONS[kind]
    extension = get_extension(name)
    start = time.perf_counter()
    with announced_if_slow(progress, build_note(kind), f"built quanto's {shown} kernels in {{seconds:.0f}} s"):
        _ = extension.lib  # builds on first use, then loads; later calls return the loaded library
    return time.perf_counter() - start


def prepare_quanto(spec: RunSpec, progress: ReportProgress | None = None) -> float:
    """The quantized cache's preparation (its registry `prepare`): seconds spent building (or loading) quanto's
    extension for this run's bits on this process's device; 0 for 8 bits on both sides (fp8: no extension).
    `progress` hears of it whenever it takes a while: a first build, a rebuild, or a build directory another
    environment is using."""
    if not set(kv_bits(spec)) & set(PACKED_BITS):
        return 0.0
    return build_kernels(device.current().kind, progress)


if __name__ == "__main__":  # scripts/device-check.sh: build this device's kernels once, before the tests
    print(f"quanto kernels for {device.current().label} ready in {build_kernels(device.current().kind):.0f} s")

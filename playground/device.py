"""The device a process computes on, as data: its kind and name, the memory the budget shares out, the XLA
compiler options of its programs, and the weights each backend refuses there.

Every place that would otherwise assume a CPU asks this object instead: model loading (where the weights go),
the JAX engine (compiler options, whether a torch tensor's memory can be shared with JAX), the memory budget
(host memory on a CPU, the GPU's own memory on a GPU), the draft model's device, and the refusals.

One process has one device. A CUDA GPU is used when torch sees one and JAX has its CUDA backend;
PLAYGROUND_DEVICE=cpu keeps a GPU machine on the CPU (PLAYGROUND_DEVICE=cuda insists on the GPU, and says why
when there is none). `configure_process()` must run before JAX starts its backends.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from playground import host
from playground.errors import PlaygroundError

KINDS = ("cpu", "cuda")

# Weights the JAX path refuses on a CPU, and why: each measured slower than fp32 in the decode loop (the
# figures, and the machines they come from: docs/jax-path.md and docs/benchmarks.md; measure this machine with
# python -m playground.tools.bench_matmul). It runs fp32, and int8 converted inside the product (int8.py).
CPU_JAX_REFUSALS = {
    "bf16": "bf16 weights are not offered on the JAX path on a CPU: XLA on CPU hoists their conversion out of the "
            "decode loop, so they decode slower than fp32, and int8 faster than both (docs/jax-path.md); use int8 "
            "or fp32",
    "nf4": "nf4 is bitsandbytes' 4-bit layout, whose layers do not trace into the JAX engine; its own 4-bit "
           "weights are q4 (docs/jax-path.md); use q4, int8 or fp32",
}
# On a GPU the JAX path builds fp32 and int8 programs only: bf16 and 4-bit twins of the decoder are not built
CUDA_JAX_REFUSALS = {
    "bf16": "bf16 weights are not offered on the JAX path on a GPU: its decoder is built for fp32 and int8 "
            "weights only; use int8 or fp32",
    "nf4": "4-bit weights are not offered on the JAX path on a GPU: its decoder is built for fp32 and int8 "
           "weights only; use int8 or fp32",
    "q4": "4-bit weights are not offered on the JAX path on a GPU: their layout is built and measured for XLA's "
          "CPU products; use int8 or fp32",
}


@dataclass(frozen=True)
class Device:
    """One device kind and what depends on it."""

    kind: str  # "cpu" or "cuda"
    name: str  # the processor's or the GPU's model name, as the columns show it
    gpu_memory_bytes: int | None  # the GPU's own memory; None on a CPU (the host's limits apply)
    # options of every compiled JAX program (part of its cache key). On a CPU, region analysis lets XLA prove
    # the in-place cache writes safe inside the decode loop instead of copying each cache array every step.
    xla_options: dict[str, Any] = field(default_factory=dict)
    # JAX matmul precision: on a GPU, XLA's default multiplies fp32 through TF32 tensor cores, which would
    # part the JAX path's tokens from PyTorch's full fp32 products
    jax_matmul_precision: str | None = None
    jax_refusals: dict[str, str] = field(default_factory=dict)  # weights -> why the JAX path refuses them here

    def memory(self) -> tuple[int, str]:
        """What the memory budget shares out, and where it was read: the GPU's memory on a GPU, else the
        host's (its cgroup limit or physical RAM, whichever is smaller: host.py)."""
        if self.gpu_memory_bytes is not None:
            return self.gpu_memory_bytes, "GPU memory"
        limits = host.limits()
        return limits.memory_bytes, limits.memory_source

    @property
    def torch_device(self) -> str:
        """Where torch puts weights and inputs: "cpu" or "cuda"."""
        return self.kind

    @property
    def jax_platform(self) -> str:
        return "gpu" if self.kind == "cuda" else "cpu"

    @property
    def label(self) -> str:
        """What a column shows: "CPU (Intel Xeon ...)" or "GPU (NVIDIA H200)"."""
        return f"{'GPU' if self.kind == 'cuda' else 'CPU'} ({self.name})"

    def jax_device(self) -> Any:
        """The JAX device arrays go to by default (the first of this platform)."""
        import jax

        return jax.devices(self.jax_platform)[0]

    def shares_with_jax(self, tensor: Any) -> bool:
        """Whether DLPack hands a torch tensor to JAX without a copy: on the same device, contiguous and, on a
        CPU, on XLA's 64-byte boundary (weights read in place from a safetensors file sit at its offsets)."""
        if tensor.device.type != self.kind or not tensor.is_contiguous():
            return False
        return self.kind != "cpu" or tensor.data_ptr() % DLPACK_ALIGNMENT == 0


DLPACK_ALIGNMENT = 64


def cpu_name() -> str:
    """The processor's model name as lscpu prints it ("Intel(R) Xeon(R) Processor"), or the platform's guess."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_device() -> Device:
    return Device("cpu", cpu_name(), None, {"xla_cpu_copy_insertion_use_region_analysis": True}, None,
                  dict(CPU_JAX_REFUSALS))


def cuda_device() -> Device:
    import torch

    properties = torch.cuda.get_device_properties(0)
    return Device("cuda", properties.name, int(properties.total_memory), {}, "highest",
                  dict(CUDA_JAX_REFUSALS))


def jax_refusals() -> dict[str, str]:
    """The weights the JAX path refuses on this process's device. Where torch is not imported yet and no NVIDIA
    driver is present, that is a CPU, known without importing torch (the page starts before torch loads)."""
    if "torch" not in sys.modules and requested() != "cuda" and not NVIDIA_DRIVER.exists():
        return CPU_JAX_REFUSALS
    return current().jax_refusals


NVIDIA_DRIVER = Path("/proc/driver/nvidia")


def _jax_has_gpu() -> bool:
    import jax

    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:  # no CUDA backend in this JAX build, or no device for it
        return False


def requested() -> str | None:
    """PLAYGROUND_DEVICE, checked: "cpu", "cuda" or unset (use a GPU when there is one)."""
    raw = os.environ.get("PLAYGROUND_DEVICE", "").strip().lower()
    if raw in ("", "auto"):
        return None
    if raw not in KINDS:
        raise PlaygroundError(f"PLAYGROUND_DEVICE={raw!r} is not a device; use one of: auto, {', '.join(KINDS)}")
    return raw


def detect() -> Device:
    """The GPU when torch sees a CUDA device and JAX has its CUDA backend (both paths must run on the same
    device for their figures to compare), else the CPU."""
    import torch

    wanted = requested()
    if wanted == "cpu":
        return cpu_device()
    torch_gpu = torch.cuda.is_available()
    if torch_gpu and _jax_has_gpu():
        return cuda_device()
    if wanted == "cuda":
        missing = "torch sees no CUDA device" if not torch_gpu else "JAX has no CUDA backend (jax[cuda13])"
        raise PlaygroundError(f"PLAYGROUND_DEVICE=cuda but {missing}; run scripts/setup.sh --gpu on a GPU machine")
    return cpu_device()


@lru_cache(maxsize=1)
def current() -> Device:
    """This process's device, detected once."""
    device = detect()
    if device.jax_matmul_precision is not None:
        import jax

        jax.config.update("jax_default_matmul_precision", device.jax_matmul_precision)
    return device


def configure_process() -> None:
    """Environment the libraries read when they start, set before they do: on a CPU-only run JAX starts no
    GPU backend, and on a GPU JAX allocates as it goes instead of taking 75% of the GPU's memory up front
    (torch shares that memory). Variables the user already set are left alone."""
    if requested() == "cpu" and "JAX_PLATFORMS" not in os.environ:
        os.environ["JAX_PLATFORMS"] = "cpu"
        jax = sys.modules.get("jax")
        if jax is not None:  # imported already: its flags read the environment at import
            jax.config.update("jax_platforms", "cpu")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

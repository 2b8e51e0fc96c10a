"""The GPU tests run only where this process's device is a CUDA GPU (scripts/device-check.sh runs them there);
everywhere else each one is skipped with the reason."""

from __future__ import annotations

import os

import pytest

# torch and JAX share the GPU: JAX allocates as it goes instead of taking 75% of its memory when it starts
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _no_gpu_reason() -> str | None:
    from playground import device

    found = device.current()
    if found.kind == "cuda":
        return None
    import torch

    why = "torch sees no CUDA device" if not torch.cuda.is_available() else "JAX has no CUDA backend"
    return f"needs a CUDA GPU for both paths; {why} (scripts/setup.sh --gpu on a GPU machine)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = _no_gpu_reason()
    for item in items:
        if "tests/gpu/" in item.nodeid:
            item.add_marker(pytest.mark.gpu)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))

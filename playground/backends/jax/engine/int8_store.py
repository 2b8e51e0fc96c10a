"""Quantized weights on disk (int8 rows, 4-bit groups): each fp32 matrix is quantized once, then read back by
every later process.

Quantizing Gemma3's 262144 x 640 output head takes seconds of numpy; reading its quantized copy takes a
fraction of that. Files sit under $PLAYGROUND_CACHE/jax-int8, named by a digest of the fp32 matrix (its shape
and a strided sample of its values, plus the quantization's format and version), so a changed model or format
never reads a stale file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from playground.backends.jax.engine.int8 import quantize_rows
from playground.backends.jax.engine.q4 import quantize_groups
from playground.models.paths import cache_root

FORMAT = "int8-rows-v1"  # change when quantize_rows changes: old files are then never read
Q4_FORMAT = "q4-row-pairs-g32-v1"  # change when quantize_groups or its packing changes
SAMPLES = 1 << 16  # values hashed per matrix (every value of a small one)


def store_dir() -> Path:
    return cache_root() / "jax-int8"


def digest(weight: np.ndarray, form: str = FORMAT) -> str:
    """Identifies an fp32 matrix cheaply: its shape, dtype and an evenly strided sample of its values."""
    flat = weight.reshape(-1)
    stride = max(1, flat.size // SAMPLES)
    h = hashlib.sha256(f"{form}:{weight.shape}:{weight.dtype}".encode())
    h.update(np.ascontiguousarray(flat[::stride]).tobytes())
    return h.hexdigest()[:32]


def quantized(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 rows, fp32 scale per row) for `weight`, from disk when an earlier process quantized it."""
    q, scale = _stored(weight, FORMAT, lambda w: quantize_rows(w), lambda arrays: arrays[0].shape == weight.shape)
    return q, scale


def quantized_q4(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(packed row pairs, scale, minimum per group of 32) for `weight` (q4.py), from disk when stored."""
    rows = weight.shape[0] + weight.shape[0] % 2
    packed, scale, minimum = _stored(weight, Q4_FORMAT, lambda w: quantize_groups(w),
                                     lambda arrays: arrays[0].shape == (rows // 2, weight.shape[1]))
    return packed, scale, minimum


def _stored(weight: np.ndarray, form: str, quantize: Callable[[np.ndarray], tuple[np.ndarray, ...]],
            fits: Callable[[list[np.ndarray]], bool]) -> tuple[np.ndarray, ...]:
    path = store_dir() / f"{digest(weight, form)}.npz"
    try:
        with np.load(path) as stored:
            arrays = [stored[f"arr_{i}"] for i in range(len(stored.files))]
        if arrays and fits(arrays):
            return tuple(arrays)
    except (OSError, KeyError, ValueError):
        pass  # not stored yet, or a torn file from a killed process: quantize again
    arrays = list(quantize(weight))
    _save(path, arrays)
    return tuple(arrays)


def _save(path: Path, arrays: list[np.ndarray]) -> None:
    """Written to a temporary file and renamed, so a reader never sees half a file; a read-only disk is fine."""
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
            tmp_name = tmp.name
            np.savez(tmp, *arrays)  # stored as arr_0, arr_1, ...
        os.replace(tmp_name, path)
    except OSError:
        if tmp_name is not None:  # a full disk: leave no half-written file behind
            Path(tmp_name).unlink(missing_ok=True)

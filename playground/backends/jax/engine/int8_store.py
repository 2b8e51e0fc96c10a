"""int8 weights on disk: each fp32 matrix is quantized once, then read back by every later process.

Quantizing Gemma3's 262144 x 640 output head takes seconds of numpy; reading its int8 copy takes a fraction
of that. Files sit under $PLAYGROUND_CACHE/jax-int8, named by a digest of the fp32 matrix (its shape and a
strided sample of its values, plus the quantization's version), so a changed model never reads a stale file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

from playground.backends.jax.engine.int8 import quantize_rows
from playground.models.paths import cache_root

FORMAT = "int8-rows-v1"  # change when quantize_rows changes: old files are then never read
SAMPLES = 1 << 16  # values hashed per matrix (every value of a small one)


def store_dir() -> Path:
    return cache_root() / "jax-int8"


def digest(weight: np.ndarray) -> str:
    """Identifies an fp32 matrix cheaply: its shape, dtype and an evenly strided sample of its values."""
    flat = weight.reshape(-1)
    stride = max(1, flat.size // SAMPLES)
    h = hashlib.sha256(f"{FORMAT}:{weight.shape}:{weight.dtype}".encode())
    h.update(np.ascontiguousarray(flat[::stride]).tobytes())
    return h.hexdigest()[:32]


def quantized(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 rows, fp32 scale per row) for `weight`, from disk when an earlier process quantized it."""
    path = store_dir() / f"{digest(weight)}.npz"
    try:
        with np.load(path) as stored:
            q, scale = stored["q"], stored["scale"]
        if q.shape == weight.shape and scale.shape == weight.shape[:1]:
            return q, scale
    except (OSError, KeyError, ValueError):
        pass  # not stored yet, or a torn file from a killed process: quantize again
    q, scale = quantize_rows(weight)
    _save(path, q, scale)
    return q, scale


def _save(path: Path, q: np.ndarray, scale: np.ndarray) -> None:
    """Written to a temporary file and renamed, so a reader never sees half a file; a read-only disk is fine."""
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
            tmp_name = tmp.name
            np.savez(tmp, q=q, scale=scale)
        os.replace(tmp_name, path)
    except OSError:
        if tmp_name is not None:  # a full disk: leave no half-written file behind
            Path(tmp_name).unlink(missing_ok=True)

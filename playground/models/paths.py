"""Where the playground keeps things on disk, and where it may read local models from."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("PLAYGROUND_CACHE", Path.home() / ".cache" / "playground")).expanduser()


def converted_dir() -> Path:
    return cache_root() / "models"


def model_roots() -> list[Path]:
    """Directories under which local models may be loaded (PLAYGROUND_MODEL_ROOTS, os.pathsep-separated)."""
    configured = os.environ.get("PLAYGROUND_MODEL_ROOTS", "")
    roots = [Path(p).expanduser() for p in configured.split(os.pathsep) if p.strip()]
    return [r.resolve() for r in (roots or [converted_dir()])]



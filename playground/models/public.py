"""What a public deployment may load: hub ids from an allow-list, with their weights checked against the memory
budget from the hub's metadata before anything is downloaded. Public means a Hugging Face Space (SPACE_ID set)
or PLAYGROUND_PUBLIC=1 (limits.is_public). Locally nothing changes."""

from __future__ import annotations

import os
from typing import Any

from playground.errors import PlaygroundError
from playground.limits import is_public

# small instruct models a visitor may pick besides the bundled ones: transformers runs them without remote code,
# and in fp32 each fits the default budget of a free CPU Space (60% of 16 GB) with room for a second
EXTRA_ALLOWED = ("HuggingFaceTB/SmolLM2-360M-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen3-0.6B")
# bytes per parameter at each precision; for int8 and nf4 a lower bound (embeddings and norms stay fp32), the
# exact estimate from the model's config follows before the weights are fetched
BYTES_PER_PARAMETER = {"fp32": 4.0, "bf16": 2.0, "int8": 1.0, "nf4": 0.5, "q4": 0.75}
WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth")
METADATA_TIMEOUT_S = 10.0


def allowed_models(bundled_sources: tuple[str, ...] = ()) -> tuple[str, ...]:
    """PLAYGROUND_ALLOWED_MODELS (comma-separated hub ids), default: the bundled models' hub sources and a few
    small instruct models."""
    configured = os.environ.get("PLAYGROUND_ALLOWED_MODELS", "")
    if configured.strip():
        return tuple(dict.fromkeys(m.strip() for m in configured.split(",") if m.strip()))
    return tuple(dict.fromkeys(bundled_sources + EXTRA_ALLOWED))


def check_allowed(name: str, kind: str, bundled_sources: tuple[str, ...] = ()) -> None:
    """On a public deployment, refuse hub ids off the allow-list and local directories; no network is used."""
    if not is_public() or kind == "bundled":
        return
    allowed = allowed_models(bundled_sources)
    if kind == "local":
        raise PlaygroundError(f"local model directories are not served by this public deployment; pick a bundled "
                              f"model or one of: {', '.join(allowed)}")
    if name.casefold() not in {m.casefold() for m in allowed}:
        raise PlaygroundError(f"model {name!r} is not served by this public deployment; pick a bundled model or one "
                              f"of: {', '.join(allowed)} (the host sets PLAYGROUND_ALLOWED_MODELS)")


def _model_info(repo_id: str) -> Any:
    from huggingface_hub import HfApi

    try:
        return HfApi().model_info(repo_id, files_metadata=True, timeout=METADATA_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - missing, gated, private or unreachable: the visitor sees one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PlaygroundError(f"could not read {repo_id!r}'s size from the hub ({first}); a public deployment "
                              "loads only models whose size it can check first") from None


def hub_weight_bytes(repo_id: str, weights: str) -> int:
    """What the weights will take at this precision, from the hub's metadata: parameter counts from the
    safetensors headers the hub indexes, else the weight files' sizes. Nothing is downloaded."""
    info = _model_info(repo_id)
    parameters = getattr(getattr(info, "safetensors", None), "total", None)
    if parameters:
        return int(parameters * BYTES_PER_PARAMETER[weights])
    files = [f for f in getattr(info, "siblings", None) or [] if f.size]
    for suffix in WEIGHT_FILES:  # one format: a repo may hold the same weights as .safetensors and .bin
        sizes = [f.size for f in files if f.rfilename.endswith(suffix)]
        if sizes:
            return sum(sizes)  # stored bytes: a lower bound when stored in half precision and loaded in fp32
    raise PlaygroundError(f"the hub lists no weight sizes for {repo_id!r}; a public deployment loads only models "
                          "whose size it can check first")

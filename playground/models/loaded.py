"""Loaded models: loading at a chosen precision within the memory budget, and the loaded-model LRU."""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, cast

from playground import device, limits
from playground.errors import PlaygroundError
from playground.models import memory, public
from playground.models.catalog import BUNDLED, check_available, hub_reachable, local_dir
from playground.models.convert import Progress, convert_gguf, no_progress


@dataclass
class LoadedModel:
    """A ready model and tokenizer, with how long it took to get here."""

    name: str
    weights: str
    model: Any  # transformers PreTrainedModel
    tokenizer: Any
    load_s: float
    instruct: bool
    # what a backend holds for this model beside its torch weights (a JAX engine's device copies), by what it is;
    # reserved through ModelLRU.reserve before the backend allocates it, freed with the model
    held: dict[str, int] = field(default_factory=dict)

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

    @property
    def total_bytes(self) -> int:
        """Everything the memory budget counts for this model: its weights and what backends hold for it."""
        return self.weight_bytes + sum(self.held.values())


def _realign(model: Any) -> None:
    """Weights read in place from a safetensors file sit at the file's offsets, which XLA cannot share: JAX
    would copy every one of them. Copied once here into aligned memory, they are shared with a JAX engine
    instead (no more memory than before: the file's mapped pages are dropped)."""
    for tensor in list(model.parameters()) + list(model.buffers()):
        # torch's CPU allocator starts tensors on that boundary; the file's offsets need not
        if tensor.device.type == "cpu" and tensor.data_ptr() % device.DLPACK_ALIGNMENT:
            tensor.data = tensor.data.clone()


# Called with a model's config before its weights load; raises a PlaygroundError to refuse the model for a run.
CheckConfig = Callable[[Any], None]


def _accept(config: Any) -> None:
    pass


def _load_kwargs(weights: str, on: str = "cpu") -> dict[str, Any]:
    """from_pretrained's arguments for `weights` on the torch device `on` (bitsandbytes quantizes as the
    weights reach a GPU, so a quantized model is placed while it loads; others are moved after)."""
    import torch

    if weights == "fp32":
        return {"dtype": torch.float32}
    if weights == "bf16":
        return {"dtype": torch.bfloat16}
    from transformers import BitsAndBytesConfig

    placed: dict[str, Any] = {} if on == "cpu" else {"device_map": {"": on}}

    if weights == "int8":
        # bitsandbytes warns at every matmul that int8 casts fp32 inputs to fp16; the README says it once
        logging.getLogger("bitsandbytes.autograd._functions").setLevel(logging.ERROR)
        return {"quantization_config": BitsAndBytesConfig(load_in_8bit=True), **placed}
    return {"quantization_config": BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32), **placed}


def _load_uncached(name: str, weights: str, progress: Progress, make_room: Callable[[str, int], None],
                   check: CheckConfig) -> LoadedModel:
    """Resolve the source, check its config (`check` may refuse), reserve memory for the weights (make_room may
    evict or refuse), then load."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # we report our own progress; tqdm bars would garble the CLI's stderr
    start = time.perf_counter()
    kind = check_available(name)
    instruct: bool | None = None
    source: str | Path
    bundled = BUNDLED[name] if kind == "bundled" else None
    if bundled is not None and not bundled.installed and bundled.hub_id and hub_reachable():
        source = bundled.hub_id  # requirements.txt alone (a Space) lacks the --no-deps package
        instruct = bundled.instruct
    elif bundled is not None:
        source = convert_gguf(name, bundled.gguf_path, progress)
        instruct = bundled.instruct
    elif kind == "local":
        directory = local_dir(name)
        if directory is None:  # it was there when check_available looked
            raise PlaygroundError(f"local model directory {name!r} is no longer there")
        source = directory
    else:
        source = name
    if limits.is_public() and kind == "hub":  # a visitor's pick: its size is checked before anything downloads
        make_room(f"model {name} ({weights})", public.hub_weight_bytes(name, weights))
    progress(0.9, f"loading {name} ({weights})")
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
        check(config)
        make_room(f"model {name} ({weights})", memory.weight_bytes_estimate(config, weights))
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        on = device.current().torch_device
        model = AutoModelForCausalLM.from_pretrained(source, trust_remote_code=False, **_load_kwargs(weights, on))
    except PlaygroundError:
        raise  # a refusal (a cache this model cannot have, no room), worded by whoever refused: not a load failure
    except (OSError, ValueError) as exc:
        raise PlaygroundError(f"could not load model {name!r}: {str(exc).splitlines()[0]}") from None
    model.eval()
    if weights in ("fp32", "bf16"):  # bitsandbytes' quantized parameters are not plain tensors: left as they are
        cast(Any, model).to(on)  # transformers' typing of `to` wraps it for a meta-device check
        _realign(model)
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

    def get(self, name: str, weights: str = "fp32", progress: Progress = no_progress,
            keep: Collection[LoadedModel] = (), check: CheckConfig = _accept) -> tuple[LoadedModel, bool]:
        """The loaded model and whether it was already in memory.

        `keep`: models the caller is using (a run's main model while its draft loads); they are never evicted
        to make room, so what the budget counts is what is really held. `check(config)` may refuse the model
        for this run; it sees the config before any weights load.
        """
        key = (name, weights)
        with self._lock:
            if key in self._models:
                check(self._models[key].model.config)
                self._models.move_to_end(key)
                return self._models[key], True
            kept = {(m.name, m.weights) for m in keep}
            loaded = _load_uncached(name, weights, progress, lambda what, need: self._make_room(what, need, kept),
                                    check)
            self._models[key] = loaded
            return loaded, False

    def reserve(self, loaded: LoadedModel, what: str, need: int, hint: str = memory.SMALLER_REQUEST) -> None:
        """Count `need` more bytes held for `loaded` (a backend's copy of its weights) before they are allocated:
        other models are evicted to make room, or a PlaygroundError says it cannot fit. Once per `what`."""
        with self._lock:
            if what in loaded.held:
                return
            key = (loaded.name, loaded.weights)
            if key not in self._models:  # evicted by another request meanwhile, yet in use: so still held
                self._models[key] = loaded
            self._models.move_to_end(key)
            self._make_room(f"{what} for {loaded.name}", need, {key}, hint, adding=False)
            loaded.held[what] = need

    def _make_room(self, what: str, need: int, kept: set[tuple[str, str]], hint: str = memory.SMALLER_REQUEST,
                   adding: bool = True) -> None:
        """Evict least recently used models (never `kept` ones) until `need` more bytes fit the budget; refuse
        at once what could not fit even with everything else evicted. `adding`: a new model takes a slot."""
        budget = memory.budget_bytes()
        pinned = sum(m.total_bytes for k, m in self._models.items() if k in kept)
        memory.check_fits(what, need, pinned, budget, hint)
        evictable = [k for k in self._models if k not in kept]  # least recently used first
        while evictable and ((adding and len(self._models) >= self.capacity)
                             or self.resident_bytes() + need > budget):
            del self._models[evictable.pop(0)]
            gc.collect()

    def resident_bytes(self) -> int:
        """Bytes the budget counts for the models held now: weights and what backends hold for them."""
        return sum(m.total_bytes for m in list(self._models.values()))

    def keys(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._models)

    def snapshot(self) -> list[LoadedModel]:
        """The loaded models, least recently used first, taken under the lock (reading them does not reorder the
        LRU, as get() would)."""
        with self._lock:
            return list(self._models.values())

    def clear(self) -> None:
        """Drop every model and collect what they held; an empty cache has nothing to free, and a collection of
        the whole heap is not free (tests empty the cache around every tiny model)."""
        with self._lock:
            if not self._models:
                return
            self._models.clear()
            gc.collect()


LOADED = ModelLRU(int(os.environ.get("PLAYGROUND_MAX_LOADED_MODELS", "2")))



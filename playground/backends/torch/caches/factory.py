"""The transformers Cache object each registered cache type builds for a run, and the real byte size of one."""

from __future__ import annotations

from typing import Any

import torch
from transformers import Cache, DynamicCache, StaticCache
from transformers.cache_utils import DynamicSlidingWindowLayer, get_layer_types_and_kwargs

from playground import registry
from playground.backends.refusals import check_cache
from playground.backends.torch.caches.croppable_quantized import CroppableFp8Layer, CroppableQuantoLayer
from playground.backends.torch.caches.croppable_static import CroppableStaticCache
from playground.backends.torch.caches.sink import SinkCache
from playground.backends.torch.caches.sliding import make_sliding_cache
from playground.backends.torch.caches.stored_dtype import stored_as
from playground.registry.kv_store import kv_bits, store_dtype
from playground.spec import RunSpec

# A static cache that torch.compile runs over is prompt + max_new_tokens rounded up to this many positions: its
# length is a shape of the compiled decode step, so a new length compiles again (the JAX path rounds its own
# static cache to the same granule, for the same reason); nearby requests share one
COMPILED_GRANULE = 64


def make_cache(spec: RunSpec, model: Any, prompt_tokens: int) -> Cache:
    """A fresh cache for one run; the caller keeps it so its size can be read afterwards."""
    check_cache(spec, model.config)
    return registry.cache_type(spec.cache).impl["torch"](spec, model, prompt_tokens)


def compiled_length(prompt_tokens: int, max_new_tokens: int) -> int:
    """The static cache's length under torch.compile."""
    return -(-(prompt_tokens + max_new_tokens) // COMPILED_GRANULE) * COMPILED_GRANULE


def _text_config(model: Any) -> Any:
    return model.config.get_text_config(decoder=True)


def dynamic_cache(spec: RunSpec, model: Any, prompt_tokens: int) -> Cache:
    return stored_as(DynamicCache(config=_text_config(model)), store_dtype(spec))


def static_cache(spec: RunSpec, model: Any, prompt_tokens: int) -> Cache:
    """Sized for this request: prompt + every token we may generate (rounded up under torch.compile). A
    drafting strategy's cache can roll rejected drafts back, and has room for the last verify pass, whose
    prompt-lookup drafts may run up to `prompt_lookup` tokens past the end (a draft model's drafts stop at the
    end)."""
    if registry.strategy(spec.strategy).drafts:
        cache: Cache = CroppableStaticCache(_text_config(model),
                                            max_cache_len=prompt_tokens + spec.max_new_tokens + spec.prompt_lookup)
        return stored_as(cache, store_dtype(spec))
    length = prompt_tokens + spec.max_new_tokens
    if spec.torch_compile != "off":  # a shape of the compiled step: rounded up, so nearby requests share one
        length = compiled_length(prompt_tokens, spec.max_new_tokens)
    return stored_as(StaticCache(config=_text_config(model), max_cache_len=length), store_dtype(spec))


def sliding_cache(spec: RunSpec, model: Any, prompt_tokens: int) -> Cache:
    """The model's own window where it has sliding layers (Gemma3: 512), spec.window imposed where it has none."""
    return stored_as(make_sliding_cache(model, spec.window), store_dtype(spec))


def sink_cache(spec: RunSpec, model: Any, prompt_tokens: int) -> Cache:
    cache = SinkCache(_text_config(model), window_length=spec.window, num_sink_tokens=spec.sink_tokens)
    return stored_as(cache, store_dtype(spec))


def quantized_cache(spec: RunSpec, model: Any, prompt_tokens: int) -> Cache:
    bits = kv_bits(spec)
    return make_quantized_cache(_text_config(model), bits.keys, spec.residual_length, value_bits=bits.values)


def make_quantized_cache(config: Any, bits: int, residual_length: int, value_bits: int | None = None) -> Cache:
    """2/4 bits: quanto, per-channel groups, newest `residual_length` tokens in full precision (KIVI), keys in
    `bits` and values in `value_bits` (default: `bits`); 8 bits (both sides): fp8, per tensor, appendable (no
    residual). Both are transformers' layers made croppable for assisted decoding (croppable_quantized.py).
    transformers' QuantizedCache refuses models with sliding layers (Gemma3); here the global layers are
    quantized and the sliding layers keep their bounded full-precision window, which is what a dynamic cache
    would keep for them too."""
    layer_types, _ = get_layer_types_and_kwargs(config)
    values = bits if value_bits is None else value_bits

    def quantized_layer() -> Any:
        if bits == values == 8:
            return CroppableFp8Layer()
        return CroppableQuantoLayer(nbits=bits, residual_length=residual_length, value_nbits=values)

    layers = [quantized_layer() if kind == "full_attention" else DynamicSlidingWindowLayer(config.sliding_window)
              for kind in layer_types]
    return Cache(layers=layers)


def kv_bytes(cache: Cache | None) -> int:
    """Bytes held by every tensor the cache's layers own (keys, values, quantized buffers)."""
    if cache is None:
        return 0
    seen: set[int] = set()
    total = 0
    for layer in getattr(cache, "layers", []):
        for value in vars(layer).values():
            total += _tensor_bytes(value, seen)
    return total


def _tensor_bytes(value: Any, seen: set[int]) -> int:
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v, seen) for v in value)
    if not isinstance(value, torch.Tensor) or id(value) in seen:
        return 0
    seen.add(id(value))
    inner = getattr(value, "__tensor_flatten__", None)
    if inner is not None and type(value) is not torch.Tensor:
        # tensor subclasses (quanto's packed tensors) hold their real storage in inner tensors
        names, _ = inner()
        return sum(_tensor_bytes(getattr(value, n), seen) for n in names)
    if value.is_meta or value.dim() == 0:
        return 0  # 0-d tensors are bookkeeping (StaticLayer's cumulative_length), not cached keys/values
    return value.numel() * value.element_size()

"""Cache type -> transformers Cache object for a run, and the real byte size of a cache's tensors."""

from __future__ import annotations

from typing import Any

import torch
from transformers import Cache, DynamicCache, QuantizedCache, StaticCache
from transformers.cache_utils import (
    DynamicSlidingWindowLayer,
    Fp8QuantizedLayer,
    QuantoQuantizedLayer,
    get_layer_types_and_kwargs,
)

from playground.backends.torch.caches.sink import SinkCache, check_supported
from playground.backends.torch.caches.sliding import check_imposable, make_sliding_cache
from playground.errors import PlaygroundError
from playground.spec import RunSpec


def check_cache(spec: RunSpec, config: Any) -> None:
    """Refuse, from the model's config alone (so before its weights load), a cache this model cannot have;
    both backends refuse with these words."""
    text_config = config.get_text_config(decoder=True)
    layer_types, _ = get_layer_types_and_kwargs(text_config)
    try:
        if spec.cache == "sink":
            check_supported(text_config)
        elif spec.cache == "sliding" and "sliding_attention" not in layer_types:
            check_imposable(text_config, layer_types)
    except ValueError as exc:
        raise PlaygroundError(str(exc)) from None


def make_cache(spec: RunSpec, model: Any, prompt_tokens: int) -> Cache:
    """A fresh cache for one run; the caller keeps it so its size can be read afterwards."""
    check_cache(spec, model.config)
    config = model.config.get_text_config(decoder=True)
    if spec.cache == "dynamic":
        return DynamicCache(config=config)
    if spec.cache == "static":
        # sized for this request exactly: prompt + every token we may generate
        return StaticCache(config=config, max_cache_len=prompt_tokens + spec.max_new_tokens)
    if spec.cache == "quantized":
        return make_quantized_cache(config, spec.cache_bits, spec.residual_length)
    if spec.cache == "sliding":
        # the model's own window where it has sliding layers (Gemma3: 512), spec.window imposed where it has none
        return make_sliding_cache(model, spec.window)
    if spec.cache == "sink":
        return SinkCache(config, window_length=spec.window, num_sink_tokens=spec.sink_tokens)
    raise ValueError(f"cache {spec.cache!r} has no builder yet")  # compatibility.py refuses these first


def make_quantized_cache(config: Any, bits: int, residual_length: int) -> Cache:
    """2/4 bits: quanto, per-channel groups, newest `residual_length` tokens in full precision (KIVI);
    8 bits: fp8, per tensor, appendable (no residual). transformers' QuantizedCache refuses models with
    sliding layers (Gemma3); for those the global layers are quantized and the sliding layers keep their
    bounded full-precision window, which is what a dynamic cache would keep for them too."""
    layer_types, _ = get_layer_types_and_kwargs(config)
    if set(layer_types) == {"full_attention"}:
        if bits == 8:
            return QuantizedCache(backend="fp8", config=config)
        return QuantizedCache(backend="quanto", config=config, nbits=bits, residual_length=residual_length)

    def quantized_layer() -> Any:
        return Fp8QuantizedLayer() if bits == 8 else QuantoQuantizedLayer(nbits=bits, residual_length=residual_length)

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

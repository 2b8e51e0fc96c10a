"""The layout of a global (not natively sliding) layer for each registered cache type on the JAX path.

Each function is a registry entry's `jax` builder: (spec, text config, whether the model has sliding layers of
its own, cache length) -> the Layout of every global layer at that length. A layout is part of the compile key.
"""

from __future__ import annotations

from typing import Any

from playground.backends.jax.caches.layout import Layout
from playground.backends.jax.caches.quantized import QuantLayout
from playground.backends.jax.caches.ring import RingLayout
from playground.backends.jax.caches.sink import SinkLayout, ring_room
from playground.backends.rope import rope_inv_freq
from playground.models.shapes import attention_shape
from playground.registry.kv_store import kv_bits, store_dtype
from playground.spec import RunSpec


def full_ring(spec: RunSpec, config: Any, native: bool, length: int) -> Layout:
    """Every position in full precision: a ring as long as the cache, which never wraps."""
    shape = attention_shape(config)
    return RingLayout(shape.kv_heads, shape.head_dim, slots=length, dtype=store_dtype(spec))


def sliding(spec: RunSpec, config: Any, native: bool, length: int) -> Layout:
    """On a model with sliding layers of its own those slide and the global ones keep everything; on any other
    model spec.window is imposed on every layer, in the cache and in the mask."""
    if native:
        return full_ring(spec, config, native, length)
    shape = attention_shape(config)
    return RingLayout(shape.kv_heads, shape.head_dim, slots=min(spec.window, length), window=spec.window,
                      dtype=store_dtype(spec))


def sink(spec: RunSpec, config: Any, native: bool, length: int) -> Layout:
    shape = attention_shape(config)
    inv_freq = tuple(float(f) for f in rope_inv_freq(config).double())
    return SinkLayout(shape.kv_heads, shape.head_dim, spec.sink_tokens, spec.window,
                      ring_room(spec.sink_tokens, spec.window, length), inv_freq, dtype=store_dtype(spec))


def quantized(spec: RunSpec, config: Any, native: bool, length: int) -> Layout:
    """8 bits on both sides keeps no full-precision residual (as transformers' fp8 layer)."""
    shape = attention_shape(config)
    bits = kv_bits(spec)
    residual = spec.residual_length if bits.residual else 0
    return QuantLayout(shape.kv_heads, shape.head_dim, bits.keys, bits.values, store=length, residual=residual,
                       slots=min(residual, length))

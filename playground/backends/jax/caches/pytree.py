"""The JAX cache as transformers sees it (a Cache of layers with `update`) and as jit sees it (a pytree).

Each layer holds its layout (static: the pytree's aux data, so it keys compiled programs), its arrays and
`cumulative_length`, the tokens written so far (traced leaves). The model calls `update` inside the traced
forward; the layer writes the new keys and values by its layout and hands our attention (traced.py) a
callback on the returned keys that attends the way the layout requires.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch
from torchax import interop
from transformers.cache_utils import Cache, CacheLayerMixin

from playground.backends.jax.caches.layout import Layout

# attribute `update` puts on the keys it returns: the layout's attention callback, read by traced.attention_forward
PENDING = "_playground_attend"


class JaxLayer(CacheLayerMixin):
    """One layer's cache under jit. A multi-token update into an empty layer is the prompt, written from position
    0, and arrives with `cumulative_length` already set to its true length (the rest of the chunk is bucket
    padding); into a filled layer it is a verify pass at `cumulative_length`."""

    is_compileable = True
    cumulative_length: Any  # () int32 array (a tracer, or a shape struct when lowering)
    arrays: dict[str, Any]  # Arrays, or shape structs when lowering

    def __init__(self, layout: Layout, arrays: dict[str, Any], cumulative_length: Any) -> None:
        super().__init__()
        self.layout, self.arrays, self.cumulative_length = layout, arrays, cumulative_length
        self.is_initialized = True

    @property
    def is_sliding(self) -> bool:
        return self.layout.window is not None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass  # allocated by the engine, never lazily

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = interop.jax_view((key_states, value_states))  # (B, KV, T, D)
        if keys.shape[2] == 1:
            self.arrays, attend = self.layout.step(self.arrays, keys, values, self.cumulative_length)
            self.cumulative_length = self.cumulative_length + 1
        elif self.arrays:  # several tokens after the prompt: assisted decoding's verify pass (caches/extend.py)
            self.arrays, attend = self.layout.extend(self.arrays, keys, values, self.cumulative_length)
            self.cumulative_length = self.cumulative_length + keys.shape[2]
        else:
            self.arrays, attend = self.layout.prefill(keys, values, self.cumulative_length)
        setattr(key_states, PENDING, attend)
        return key_states, value_states

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        # never used for masks (our attention registers no mask function); sized as what attention reads
        return max(shape[1] for shape, _ in self.layout.leaves().values()) + query_length, 0

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_max_length(self) -> int:
        return -1


class JaxCache(Cache):
    """A transformers Cache whose layers are JaxLayers, registered as a JAX pytree."""

    def __init__(self, layers: list[JaxLayer]) -> None:
        super().__init__(layers=list(layers))

    @property
    def jax_layers(self) -> list[JaxLayer]:
        return self.layers  # type: ignore[return-value]

    @property
    def layouts(self) -> tuple[Layout, ...]:
        return tuple(layer.layout for layer in self.jax_layers)


def _flatten(cache: JaxCache) -> tuple[list[Any], tuple[Layout, ...]]:
    leaves: list[Any] = []
    for layer in cache.jax_layers:
        leaves.append(layer.cumulative_length)
        leaves += [layer.arrays[name] for name in sorted(layer.layout.leaves())]
    return leaves, cache.layouts


def _unflatten(layouts: tuple[Layout, ...], leaves: Any) -> JaxCache:
    """Rebuild without touching the leaves: JAX also unflattens with tracers, sentinels or shape structs."""
    leaves = iter(leaves)
    layers = []
    for layout in layouts:
        counter = next(leaves)
        layers.append(JaxLayer(layout, {name: next(leaves) for name in sorted(layout.leaves())}, counter))
    return JaxCache(layers)


jax.tree_util.register_pytree_node(JaxCache, _flatten, _unflatten)


def empty_cache(layouts: tuple[Layout, ...], length: jax.Array) -> JaxCache:
    """A cache about to receive a prompt of true length `length`: no arrays yet (the prompt's update makes
    them), every counter at `length`."""
    return JaxCache([JaxLayer(layout, {}, length) for layout in layouts])


def abstract_cache(layouts: tuple[Layout, ...], batch: int, sharding: Any = None,
                   counter_sharding: Any = None) -> JaxCache:
    """Shape structs in place of the arrays, to lower a program without allocating a cache."""
    layers = []
    for layout in layouts:
        arrays = {name: jax.ShapeDtypeStruct((batch, *shape), dtype, sharding=sharding)
                  for name, (shape, dtype) in layout.leaves().items()}
        layers.append(JaxLayer(layout, arrays, jax.ShapeDtypeStruct((), jnp.int32, sharding=counter_sharding)))
    return JaxCache(layers)


def grown(cache: JaxCache, layouts: tuple[Layout, ...]) -> JaxCache:
    """The same cache in larger layouts: every array padded with empty slots at the end. Valid while no ring
    has wrapped, which the plan guarantees: a ring only wraps once it has reached its final size."""
    layers = []
    for layer, layout in zip(cache.jax_layers, layouts, strict=True):
        arrays = {}
        for name, (shape, _) in layout.leaves().items():
            old = layer.arrays[name]
            pad = [(0, 0)] + [(0, new - now) for new, now in zip(shape, old.shape[1:], strict=True)]
            arrays[name] = jnp.pad(old, pad)
        layers.append(JaxLayer(layout, arrays, layer.cumulative_length))
    return JaxCache(layers)


def cache_bytes(cache: JaxCache) -> int:
    """Bytes of every array the cache holds (filled or not): keys, values, quantized data, scales."""
    return sum(int(array.nbytes) for layer in cache.jax_layers for array in layer.arrays.values())

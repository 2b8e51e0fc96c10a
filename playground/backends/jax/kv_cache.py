"""transformers' StaticCache as a pytree (JAX and torch side), preallocated on the JAX device.

jit and lax loops need the cache as leaves (keys, values and the in-place `cumulative_length` counter per
layer) plus static aux data; torchax converts arguments with torch's pytree, so both registrations exist.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch
import torch.utils._pytree as torch_pytree
from torchax import interop
from transformers import StaticCache
from transformers.cache_utils import Cache, StaticLayer

from playground.errors import PlaygroundError
from playground.models.shapes import attention_shape

# attribute a one-token update puts on the keys it returns, read by jax_model.attention_forward
PENDING = "_playground_pending"


def _write(keys: jax.Array, values: jax.Array, new_keys: jax.Array, new_values: jax.Array,
           start: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Write the new positions in place; dynamic_update_slice clamps instead of guarding out-of-range
    writes, so XLA updates the (donated) buffers without copying them."""
    zero = jnp.zeros((), start.dtype)
    index = (zero, zero, start, zero)
    return (jax.lax.dynamic_update_slice(keys, new_keys.astype(keys.dtype), index),
            jax.lax.dynamic_update_slice(values, new_values.astype(values.dtype), index))


class JaxStaticLayer(StaticLayer):
    """A StaticLayer whose update is one dynamic_update_slice per array.

    transformers' update goes through index_copy_, which JAX lowers to a guarded scatter: the guard reads
    the old slice, and that read makes XLA copy the whole cache array on every decoding step.
    """

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        old_keys, old_values, start = self.keys, self.values, self.cumulative_length
        self.keys, self.values = interop.call_jax(_write, old_keys, old_values, key_states, value_states, start)
        self.cumulative_length = start + key_states.shape[-2]
        if key_states.shape[-2] == 1:
            # lets our attention read the arrays before the write plus the new row (see jax_model)
            setattr(self.keys, PENDING, (old_keys, old_values, key_states, value_states, start))
        return self.keys, self.values


class FullLengthSlidingLayer(JaxStaticLayer):
    """A sliding-window layer stored at full length.

    transformers' StaticSlidingWindowLayer keeps a Python int (`cumulative_length_int`) that shapes its masks:
    as static aux data it would recompile every step, dropped it gives wrong logits. Storing every position
    and declaring `is_sliding` lets the model's own sliding-window mask work on absolute positions instead,
    which traces once and matches eager attention exactly.
    """

    is_sliding = True


_LEAVES = ("keys", "values", "cumulative_length")


def _static_attributes(obj: Any, skip: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    """The object's other attributes (dtype, device, shape fields, is_initialized, ...), restored on unflatten.

    Aux data must be hashable: JAX keys compiled programs by it.
    """
    items = []
    for name, value in sorted(vars(obj).items()):
        if name in skip:
            continue
        try:
            hash(value)
        except TypeError:
            continue
        items.append((name, value))
    return tuple(items)


def _flatten(cache: StaticCache) -> tuple[list[Any], tuple]:
    leaves: list[Any] = []
    layers = []
    for layer in cache.layers:
        leaves += [getattr(layer, name, None) for name in _LEAVES]
        layers.append((type(layer), _static_attributes(layer, _LEAVES)))
    return leaves, (tuple(layers), _static_attributes(cache, ("layers",)))


def _unflatten(aux: tuple, leaves: Any) -> StaticCache:
    """Rebuild without touching the leaves: JAX also unflattens with tracers, sentinels or shape structs."""
    layer_aux, cache_attributes = aux
    leaves = list(leaves)
    layers = []
    for i, (cls, attributes) in enumerate(layer_aux):
        layer = cls.__new__(cls)
        layer.__dict__.update(attributes)
        layer.__dict__.update(zip(_LEAVES, leaves[3 * i: 3 * i + 3], strict=True))
        layers.append(layer)
    cache = StaticCache.__new__(StaticCache)
    cache.__dict__.update(cache_attributes)
    cache.layers = layers
    return cache


def _torch_flatten(cache: StaticCache) -> tuple[list[Any], Any]:
    return _flatten(cache)


def _torch_unflatten(leaves: Any, aux: Any) -> StaticCache:
    return _unflatten(aux, leaves)


def register() -> None:
    """Registers StaticCache with JAX's and torch's pytrees (each once; torchax converts through torch's)."""
    try:
        jax.tree_util.register_pytree_node(StaticCache, _flatten, _unflatten)
    except ValueError:  # already registered in this process
        pass
    if StaticCache not in torch_pytree.SUPPORTED_NODES:
        torch_pytree.register_pytree_node(StaticCache, _torch_flatten, _torch_unflatten,
                                          serialized_type_name="transformers.StaticCache")


register()


def cache_layout(model: Any) -> list[tuple[type, int, int]]:
    """(layer class, kv heads, head dim) per decoder layer, read from the model's text config."""
    config = model.config.get_text_config(decoder=True)
    probe = StaticCache(config=config, max_cache_len=1)  # dispatches layer types as transformers would
    shape = attention_shape(config)
    layout = []
    for layer in probe.layers:
        if type(layer) is StaticLayer:
            cls: type = JaxStaticLayer
        elif getattr(layer, "is_sliding", False):
            cls = FullLengthSlidingLayer
        else:
            raise PlaygroundError(f"the JAX decoder does not support {type(layer).__name__} cache layers "
                                  "(only full and sliding-window attention); use backend torch")
        layout.append((cls, shape.kv_heads, shape.head_dim))
    return layout


def make_cache(layout: list[tuple[type, int, int]], max_cache_len: int, batch: int = 1,
               sharding: jax.sharding.Sharding | None = None, abstract: bool = False) -> StaticCache:
    """A StaticCache whose leaves are zeroed JAX arrays of shape (batch, kv_heads, max_cache_len, head_dim).

    `abstract`: shape structs instead of arrays, to lower a program without allocating a cache.
    """

    def zeros(shape: tuple[int, ...], dtype: Any, where: Any) -> Any:
        if abstract:
            return jax.ShapeDtypeStruct(shape, dtype, sharding=where)
        return jnp.zeros(shape, dtype, device=where)

    length_dtype = jnp.int64 if jax.config.read("jax_enable_x64") else jnp.int32
    counter_sharding = None  # the scalar counter is replicated wherever the arrays are split
    if isinstance(sharding, jax.sharding.NamedSharding):
        counter_sharding = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    layers = []
    for cls, heads, head_dim in layout:
        layer = cls(max_cache_len=max_cache_len)
        shape = (batch, heads, max_cache_len, head_dim)
        layer.keys = zeros(shape, jnp.float32, sharding)
        layer.values = zeros(shape, jnp.float32, sharding)
        layer.cumulative_length = zeros((), length_dtype, counter_sharding)
        layer.dtype, layer.device = torch.float32, torch.device("jax")
        layer.batch_size, layer.num_heads, layer.k_head_dim, layer.v_head_dim = batch, heads, head_dim, head_dim
        layer.is_initialized = True
        layers.append(layer)
    cache = StaticCache.__new__(StaticCache)
    Cache.__init__(cache, layers=layers)
    return cache


def cache_bytes(cache: StaticCache) -> int:
    """Bytes of the preallocated key and value arrays (what the cache holds, filled or not)."""
    layers: list[Any] = cache.layers  # make_cache's layers: JAX arrays where transformers' types say torch.Tensor
    return sum(int(layer.keys.nbytes) + int(layer.values.nbytes) for layer in layers)

"""What every cache layout shares: the Layout interface, the attention callback it hands over, row writes.

A layout is a frozen, hashable description of one layer's cache (which arrays, their shapes, how positions
map to slots). It is static: it keys compiled programs, so everything that changes a shape or a branch
lives here, and everything that changes per step (the position) is traced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp

# attend(query (B, H, Q, D), scaling=..., softcap=...) -> attention output (B, Q, H, D)
Attend = Callable[..., jax.Array]
Arrays = dict[str, jax.Array]
# leaf name -> (shape after the batch axis, dtype)
LeafShapes = dict[str, tuple[tuple[int, ...], Any]]


class Layout(Protocol):
    """One layer's cache layout; every leaf is (B, KV heads, slots, ...) so one sharding rule splits them all."""

    @property
    def heads(self) -> int:
        """KV heads."""
        ...

    @property
    def head_dim(self) -> int: ...

    @property
    def window(self) -> int | None:
        """The attention window this layer applies (None: global)."""
        ...

    def leaves(self) -> LeafShapes:
        """The arrays this layout stores."""
        ...

    def resized(self, length: int) -> Layout:
        """This layout for a cache of `length` positions (bounded layouts stop growing at their bound)."""
        ...

    def prefill(self, keys: jax.Array, values: jax.Array, length: jax.Array) -> tuple[Arrays, Attend]:
        """A prompt chunk (B, KV, T, D) of true length `length`, written from position 0: the arrays it leaves
        and how its queries attend."""
        ...

    def step(self, arrays: Arrays, key: jax.Array, value: jax.Array,
             position: jax.Array) -> tuple[Arrays, Attend]:
        """One new token (B, KV, 1, D) at `position`: the updated arrays and how its query attends."""
        ...

    def with_room(self, width: int) -> Layout:
        """This layout with room for verify passes of `width` tokens to be rolled back (caches/extend.py)."""
        ...

    def extend(self, arrays: Arrays, keys: jax.Array, values: jax.Array,
               position: jax.Array) -> tuple[Arrays, Attend]:
        """W new tokens (B, KV, W, D) from `position` (a verify pass): the updated arrays and how they attend,
        each query as a single step at its position would."""
        ...


def write_row(array: jax.Array, row: jax.Array, slot: jax.Array) -> jax.Array:
    """Write one row in place at `slot` along the slot axis. dynamic_update_slice clamps instead of guarding,
    so XLA updates the (donated) buffer without copying it."""
    zero = jnp.zeros((), slot.dtype)
    index = (zero, zero, slot, *([zero] * (array.ndim - 3)))
    return jax.lax.dynamic_update_slice(array, row.astype(array.dtype), index)


def stored(x: jax.Array, dtype: str) -> jax.Array:
    """`x` as a store of `dtype` gives it back, in float32: a bf16 store rounds each key and value once, when it is
    written, and attention computes in fp32 over what the store holds (the new token's own key included, as the
    PyTorch cache returns it from its store)."""
    return x if dtype == "float32" else x.astype(dtype).astype(jnp.float32)


def read(array: jax.Array) -> jax.Array:
    """A stored array as attention computes over it: float32."""
    return array.astype(jnp.float32)


def nbytes(layout: Layout, batch: int = 1) -> int:
    """Bytes of every array the layout stores."""
    total = 0
    for shape, dtype in layout.leaves().values():
        count = batch
        for n in shape:
            count *= n
        total += count * jnp.dtype(dtype).itemsize
    return total

"""Full-precision layers as ring buffers: a global layer is a ring that never wraps, a sliding one wraps.

Position p lives in slot p % slots. A global layer has as many slots as the cache has positions, so it
never wraps and its slots are in position order (the growing and the static cache differ only in when the
slots are allocated). A sliding layer with window W stops at W slots: writing position p overwrites p - W,
the one position the window has just let go, so the ring holds exactly what the window sees (the new token
and the W - 1 before it, transformers' definition) in a shape that never changes, and a long run neither
recompiles nor grows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp

from playground.backends.jax.caches.layout import Arrays, Attend, LeafShapes, read, stored, write_row
from playground.backends.jax.model.attention import (
    Segment,
    block_attention,
    block_positions,
    gather_ring,
    prompt_attention,
    ring_positions,
    step_attention,
    write_ring_rows,
)


def ring_slots(window: int | None, length: int, spare: int = 0) -> int:
    """Slots for a cache of `length` positions: all of them, or the window (and `spare` slots a verify pass
    writes into) once the cache is longer."""
    return length if window is None else min(window + spare, length)


def in_window(held: jax.Array, query: jax.Array, window: int | None) -> jax.Array:
    """Whether the positions `held` lie within `window` of the query position(s) (always, with no window)."""
    return jnp.ones(held.shape, bool) if window is None else held > query - window


@dataclass(frozen=True)
class RingLayout:
    """keys and values (B, KV, slots, D) in full precision: stored as `dtype` (float32 or bfloat16), read as
    float32."""

    heads: int
    head_dim: int
    slots: int
    window: int | None = None  # each token sees itself and window - 1 before it; None: global
    spare: int = 0  # slots past the window: a verify pass of spare + 1 tokens overwrites none it needs back
    dtype: str = "float32"  # the store's dtype (cache_dtype); attention reads it as float32

    def leaves(self) -> LeafShapes:
        shape = (self.heads, self.slots, self.head_dim)
        return {"keys": (shape, jnp.dtype(self.dtype)), "values": (shape, jnp.dtype(self.dtype))}

    def resized(self, length: int) -> RingLayout:
        return dataclasses.replace(self, slots=ring_slots(self.window, length, self.spare))

    def with_room(self, width: int) -> RingLayout:
        return dataclasses.replace(self, spare=width - 1)

    def prefill(self, keys: jax.Array, values: jax.Array, length: jax.Array) -> tuple[Arrays, Attend]:
        keys, values = stored(keys, self.dtype), stored(values, self.dtype)
        arrays = {"keys": gather_ring(keys, length, self.slots).astype(self.dtype),
                  "values": gather_ring(values, length, self.slots).astype(self.dtype)}
        return arrays, partial(prompt_attention, key=keys, value=values, window=self.window)

    def step(self, arrays: Arrays, key: jax.Array, value: jax.Array,
             position: jax.Array) -> tuple[Arrays, Attend]:
        key, value = stored(key, self.dtype), stored(value, self.dtype)
        slot = jnp.mod(position, self.slots)
        held = ring_positions(self.slots, position)  # (slots,); the write slot holds `position` itself
        seen = Segment(read(arrays["keys"]), read(arrays["values"]),
                       (held >= 0) & (held < position) & in_window(held, position, self.window))
        written = {"keys": write_row(arrays["keys"], key, slot), "values": write_row(arrays["values"], value, slot)}
        return written, partial(step_attention, segments=[seen], new_key=key, new_value=value)

    def extend(self, arrays: Arrays, keys: jax.Array, values: jax.Array,
               position: jax.Array) -> tuple[Arrays, Attend]:
        """W tokens at once, each seeing the ring as plain decoding would have left it for its position. A
        rejected draft's slot reads as `slots` positions older than it is: out of every window, given spare."""
        keys, values = stored(keys, self.dtype), stored(values, self.dtype)
        queries = block_positions(position, keys.shape[2])  # (W,)
        held = ring_positions(self.slots, position - 1)  # (slots,) before the write
        seen = (held >= 0) & (held < position) & in_window(held[None, :], queries[:, None], self.window)
        own = (queries[None, :] <= queries[:, None]) & in_window(queries[None, :], queries[:, None], self.window)
        slots = jnp.mod(queries, self.slots)
        written = {"keys": write_ring_rows(arrays["keys"], keys, slots),
                   "values": write_ring_rows(arrays["values"], values, slots)}
        segments = [Segment(read(arrays["keys"]), read(arrays["values"]), seen), Segment(keys, values, own)]
        return written, partial(block_attention, segments=segments)

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

from playground.backends.jax.attention import Segment, gather_ring, prompt_attention, ring_positions, step_attention
from playground.backends.jax.caches.layout import Arrays, Attend, LeafShapes, write_row


def ring_slots(window: int | None, length: int) -> int:
    """Slots for a cache of `length` positions: all of them, or the window once the cache is longer."""
    return length if window is None else min(window, length)


@dataclass(frozen=True)
class RingLayout:
    """keys and values (B, KV, slots, D) in full precision."""

    heads: int
    head_dim: int
    slots: int
    window: int | None = None  # each token sees itself and window - 1 before it; None: global

    def leaves(self) -> LeafShapes:
        shape = (self.heads, self.slots, self.head_dim)
        return {"keys": (shape, jnp.float32), "values": (shape, jnp.float32)}

    def resized(self, length: int) -> RingLayout:
        return dataclasses.replace(self, slots=ring_slots(self.window, length))

    def prefill(self, keys: jax.Array, values: jax.Array, length: jax.Array) -> tuple[Arrays, Attend]:
        arrays = {"keys": gather_ring(keys, length, self.slots), "values": gather_ring(values, length, self.slots)}
        return arrays, partial(prompt_attention, key=keys, value=values, window=self.window)

    def step(self, arrays: Arrays, key: jax.Array, value: jax.Array,
             position: jax.Array) -> tuple[Arrays, Attend]:
        slot = jnp.mod(position, self.slots)
        held = ring_positions(self.slots, position)  # (slots,); the write slot holds `position` itself
        seen = Segment(arrays["keys"], arrays["values"], (held >= 0) & (held < position))
        written = {"keys": write_row(arrays["keys"], key, slot), "values": write_row(arrays["values"], value, slot)}
        return written, partial(step_attention, segments=[seen], new_key=key, new_value=value)

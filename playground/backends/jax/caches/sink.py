"""StreamingLLM attention sinks in fixed shapes: `sinks` slots for the first tokens, a ring for the recent ones.

The rule is the PyTorch sink cache's (playground.backends.torch.caches.sink), so both backends give the same
tokens: the cache keeps the first `sinks` tokens plus the most recent `window - sinks` (the new one included);
the prompt attends over all of itself causally; and once tokens have been evicted, the sink keys, stored as first seen,
are rotated forward by the number of evicted tokens, so the kept keys form one contiguous run of RoPE
positions ending at the query (the distances StreamingLLM's positions-within-the-cache give). Position
p < sinks lives in sink slot p; position p >= sinks in ring slot (p - sinks) % slots.
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


def rotate_keys(keys: jax.Array, shift: jax.Array, inv_freq: tuple[float, ...]) -> jax.Array:
    """RoPE-rotated keys (B, KV, S, D) moved by `shift` positions (HF's rotate-half layout), R(a) R(b) = R(a + b)."""
    angles = shift.astype(jnp.float32) * jnp.asarray(inv_freq, jnp.float32)  # (D/2,)
    emb = jnp.concatenate([angles, angles])  # (D,)
    half = keys.shape[-1] // 2
    rotated_half = jnp.concatenate([-keys[..., half:], keys[..., :half]], axis=-1)
    return keys * jnp.cos(emb) + rotated_half * jnp.sin(emb)


def rotate_keys_per_query(keys: jax.Array, shifts: jax.Array, inv_freq: tuple[float, ...]) -> jax.Array:
    """Keys (B, KV, N, D) moved by each query's shift (W,): (B, KV, W, N, D)."""
    return jax.vmap(lambda shift: rotate_keys(keys, shift, inv_freq), out_axes=2)(shifts)


def ring_room(sinks: int, window: int, length: int, spare: int = 0) -> int:
    """Ring slots for a cache of `length` positions: the recent room (and `spare` slots a verify pass writes
    into), or less while the cache is shorter."""
    return max(1, min(window - sinks + spare, length - sinks))


@dataclass(frozen=True)
class SinkLayout:
    """sink_keys / sink_values (B, KV, sinks, D) as first seen, keys / values (B, KV, slots, D) the recent ring."""

    heads: int
    head_dim: int
    sinks: int
    cache_window: int  # sinks + recent tokens kept
    slots: int
    inv_freq: tuple[float, ...]  # the model's RoPE inverse frequencies (D/2,)
    spare: int = 0  # ring slots past the recent room: a verify pass of spare + 1 tokens overwrites none it needs
    dtype: str = "float32"  # the store's dtype (cache_dtype); attention reads it as float32

    @property
    def recent(self) -> int:
        """Recent tokens a query sees, itself included."""
        return self.cache_window - self.sinks

    @property
    def window(self) -> int | None:
        return None  # the window is kept by eviction; attention within it is global

    def leaves(self) -> LeafShapes:
        ring = (self.heads, self.slots, self.head_dim)
        sink = (self.heads, self.sinks, self.head_dim)
        dtype = jnp.dtype(self.dtype)
        leaves: LeafShapes = {"keys": (ring, dtype), "values": (ring, dtype)}
        if self.sinks:
            leaves |= {"sink_keys": (sink, dtype), "sink_values": (sink, dtype)}
        return leaves

    def resized(self, length: int) -> SinkLayout:
        return dataclasses.replace(self, slots=ring_room(self.sinks, self.cache_window, length, self.spare))

    def with_room(self, width: int) -> SinkLayout:
        return dataclasses.replace(self, spare=width - 1)

    def prefill(self, keys: jax.Array, values: jax.Array, length: jax.Array) -> tuple[Arrays, Attend]:
        keys, values = stored(keys, self.dtype), stored(values, self.dtype)
        arrays = {"keys": gather_ring(keys, length, self.slots, first=self.sinks),
                  "values": gather_ring(values, length, self.slots, first=self.sinks)}
        if self.sinks:
            first = jnp.clip(jnp.arange(self.sinks), 0, keys.shape[2] - 1)  # slots past the prompt stay masked
            arrays |= {"sink_keys": jnp.take(keys, first, axis=2), "sink_values": jnp.take(values, first, axis=2)}
        arrays = {name: array.astype(self.dtype) for name, array in arrays.items()}
        # the prompt attends over all of itself, causally, as the PyTorch sink cache lets a long first chunk do
        return arrays, partial(prompt_attention, key=keys, value=values, window=None)

    def step(self, arrays: Arrays, key: jax.Array, value: jax.Array,
             position: jax.Array) -> tuple[Arrays, Attend]:
        key, value = stored(key, self.dtype), stored(value, self.dtype)
        held = self.sinks + ring_positions(self.slots, position - self.sinks)  # (slots,)
        recent = (held >= self.sinks) & (held < position) & (held > position - self.recent)
        seen = Segment(read(arrays["keys"]), read(arrays["values"]), recent)
        slot = jnp.mod(position - self.sinks, self.slots)  # a sink token's write here stays masked until reused
        written = {"keys": write_row(arrays["keys"], key, slot), "values": write_row(arrays["values"], value, slot)}
        if self.sinks:
            evicted = jnp.maximum(position + 1 - self.cache_window, 0)
            # rotated in fp32 and stored again, as the PyTorch sink cache keeps its moved sinks
            moved = stored(rotate_keys(read(arrays["sink_keys"]), evicted, self.inv_freq), self.dtype)  # (B, KV, S, D)
            # the sinks joined before the ring: one attention pass per query group instead of two
            seen = Segment(jnp.concatenate([moved, seen.keys], axis=2),
                           jnp.concatenate([read(arrays["sink_values"]), seen.values], axis=2),
                           jnp.concatenate([jnp.arange(self.sinks) < position, seen.allowed]))
            is_sink = position < self.sinks
            index = jnp.minimum(position, self.sinks - 1)
            for name, row in (("sink_keys", key), ("sink_values", value)):
                written[name] = jnp.where(is_sink, write_row(arrays[name], row, index), arrays[name])
        return written, partial(step_attention, segments=[seen], new_key=key, new_value=value)

    def extend(self, arrays: Arrays, keys: jax.Array, values: jax.Array,
               position: jax.Array) -> tuple[Arrays, Attend]:
        """W tokens at once, each seeing what plain decoding would show it: its own recent tokens, and the sinks
        rotated by its own eviction count (a key row per query)."""
        keys, values = stored(keys, self.dtype), stored(values, self.dtype)
        width = keys.shape[2]
        queries = block_positions(position, width)  # (W,)
        evicted = jnp.maximum(queries + 1 - self.cache_window, 0)  # (W,)
        held = self.sinks + ring_positions(self.slots, position - 1 - self.sinks)  # (slots,) before the write
        recent = (held >= self.sinks) & (held < position) & (held[None, :] > queries[:, None] - self.recent)
        segments = [Segment(read(arrays["keys"]), read(arrays["values"]), recent)]
        # the block's own tokens: recent ones as they are; one at a sink position is seen as a sink, rotated by the
        # query's eviction count, which is 0 for every query of a block narrower than the recent room + 1
        is_sink = queries < self.sinks  # (W,)
        own_rows = keys if width <= self.recent + 1 else jnp.where(
            is_sink[None, None, None, :, None], rotate_keys_per_query(keys, evicted, self.inv_freq), keys[:, :, None])
        own = (queries[None, :] <= queries[:, None]) & (
            (queries[None, :] > queries[:, None] - self.recent) | is_sink[None, :])
        written = {name: write_ring_rows(arrays[name], rows, jnp.mod(queries - self.sinks, self.slots))
                   for name, rows in (("keys", keys), ("values", values))}
        if self.sinks:
            moved = stored(rotate_keys_per_query(read(arrays["sink_keys"]), evicted, self.inv_freq),
                           self.dtype)  # (B, KV, W, S, D)
            segments.insert(0, Segment(moved, read(arrays["sink_values"]), jnp.arange(self.sinks) < position))
            index = jnp.where(is_sink, queries, self.sinks)  # past the end: dropped
            for name, rows in (("sink_keys", keys), ("sink_values", values)):
                written[name] = arrays[name].at[:, :, index].set(rows.astype(arrays[name].dtype), mode="drop")
        segments.append(Segment(own_rows, values, own))
        return written, partial(block_attention, segments=segments)

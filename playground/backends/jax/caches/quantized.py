"""Quantized keys and values inside the jitted step: packed integers plus scales, dequantized in attention.

The meaning of the bits is the PyTorch path's (transformers' QuantizedCache): with 2 or 4 bits, each
group of QUANT_GROUP channels of one token's head is quantized asymmetrically (min and scale, as quanto's
MaxOptimizer does) and packed 4 or 2 to a byte, and the newest `residual` tokens are also kept in full
precision in a ring; attention reads them from the ring and everything older from the quantized store.
With 8 bits, the same groups in one byte each (finer than the PyTorch path's fp8 per tensor) and, when keys and
values both take 8, no residual, as there. Keys and values each have their own bits (`key_bits`, `value_bits`).
Every token is quantized once, when written; no full-precision copy of the store is kept (each step dequantizes
the store it reads, inside the jitted attention).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp

from playground.backends.jax.caches.layout import Arrays, Attend, LeafShapes, write_row
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

QUANT_GROUP = 64  # channels per scale, as transformers' q_group_size


def group_size(head_dim: int) -> int:
    return math.gcd(QUANT_GROUP, head_dim)


def quantize(x: jax.Array, bits: int, group: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """x (B, KV, T, D) -> (codes packed 8 / bits to a byte (B, KV, T, D * bits / 8), scale and zero point
    (B, KV, T, D / group)): code = round((x - min) / scale) over each group's [min, max]."""
    grouped = x.reshape(*x.shape[:-1], x.shape[-1] // group, group).astype(jnp.float32)  # (B, KV, T, G, g)
    low, high = grouped.min(axis=-1), grouped.max(axis=-1)  # (B, KV, T, G)
    scale = jnp.maximum((high - low) / (2**bits - 1), jnp.finfo(jnp.float32).tiny)
    codes = jnp.clip(jnp.round((grouped - low[..., None]) / scale[..., None]), 0, 2**bits - 1).astype(jnp.uint8)
    per_byte = 8 // bits
    codes = codes.reshape(*x.shape[:-1], x.shape[-1] // per_byte, per_byte)  # (B, KV, T, D / per_byte, per_byte)
    shifts = (jnp.arange(per_byte, dtype=jnp.uint8) * bits).astype(jnp.uint8)
    packed = jnp.sum(jnp.left_shift(codes, shifts), axis=-1, dtype=jnp.uint8)  # disjoint bits: sum = or
    return packed, scale, low


def dequantize(data: jax.Array, scale: jax.Array, zero: jax.Array, bits: int, group: int) -> jax.Array:
    """The inverse of quantize(), up to rounding: (B, KV, T, D) float32."""
    per_byte = 8 // bits
    shifts = (jnp.arange(per_byte, dtype=jnp.uint8) * bits).astype(jnp.uint8)
    codes = jnp.bitwise_and(jnp.right_shift(data[..., None], shifts), 2**bits - 1)  # (..., D / per_byte, per_byte)
    values = codes.reshape(*data.shape[:-1], -1).astype(jnp.float32)  # (B, KV, T, D)
    grouped = values.reshape(*values.shape[:-1], -1, group) * scale[..., None] + zero[..., None]
    return grouped.reshape(values.shape)


@dataclass(frozen=True)
class QuantLayout:
    """A quantized store of every position plus a full-precision ring of the newest `residual` ones."""

    heads: int
    head_dim: int
    key_bits: int
    value_bits: int
    store: int  # positions in the quantized store
    residual: int  # newest tokens also kept in full precision (0: none)
    slots: int  # ring slots now: min(residual + spare, store), none without a residual
    spare: int = 0  # ring slots past the residual: a verify pass of spare + 1 tokens overwrites none it needs

    @property
    def fresh(self) -> int:
        """The newest positions a token reads in full precision, itself included; older ones from the store."""
        return max(min(self.residual, self.store), 1)

    @property
    def window(self) -> int | None:
        return None

    def bits(self, kind: str) -> int:
        """The bits of one side: "keys" or "values"."""
        return self.key_bits if kind == "keys" else self.value_bits

    def leaves(self) -> LeafShapes:
        groups = self.head_dim // group_size(self.head_dim)
        scale = ((self.heads, self.store, groups), jnp.float32)
        leaves: LeafShapes = {}
        for kind in ("keys", "values"):
            data = ((self.heads, self.store, self.head_dim * self.bits(kind) // 8), jnp.uint8)
            leaves[f"{kind}_data"], leaves[f"{kind}_scale"], leaves[f"{kind}_zero"] = data, scale, scale
            if self.slots:
                leaves[kind] = ((self.heads, self.slots, self.head_dim), jnp.float32)
        return leaves

    def resized(self, length: int) -> QuantLayout:
        return dataclasses.replace(self, store=length,
                                   slots=min(self.residual + self.spare, length) if self.residual else 0)

    def with_room(self, width: int) -> QuantLayout:
        return dataclasses.replace(self, spare=width - 1)

    def _quantized(self, x: jax.Array, kind: str) -> Arrays:
        data, scale, zero = quantize(x, self.bits(kind), group_size(self.head_dim))
        return {f"{kind}_data": data, f"{kind}_scale": scale, f"{kind}_zero": zero}

    def _read(self, arrays: Arrays, kind: str) -> jax.Array:
        return dequantize(arrays[f"{kind}_data"], arrays[f"{kind}_scale"], arrays[f"{kind}_zero"], self.bits(kind),
                          group_size(self.head_dim))

    def prefill(self, keys: jax.Array, values: jax.Array, length: jax.Array) -> tuple[Arrays, Attend]:
        arrays: Arrays = {}
        start = jnp.zeros((), jnp.int32)
        for kind, chunk in (("keys", keys), ("values", values)):
            for name, part in self._quantized(chunk[:, :, : self.store], kind).items():  # past it: padding
                empty = jnp.zeros((*part.shape[:2], self.store, part.shape[3]), part.dtype)
                arrays[name] = write_row(empty, part, start)  # the padded chunk from position 0
            if self.slots:
                arrays[kind] = gather_ring(chunk, length, self.slots)
        # the prompt attends in full precision, as transformers' quantized cache lets its first chunk do
        return arrays, partial(prompt_attention, key=keys, value=values, window=None)

    def step(self, arrays: Arrays, key: jax.Array, value: jax.Array,
             position: jax.Array) -> tuple[Arrays, Attend]:
        # one segment: the store dequantized, with the positions the ring holds in full precision put back over
        # their quantized copies (the store holds every position, so every earlier one is there once)
        keys, values = self._read(arrays, "keys"), self._read(arrays, "values")
        written = dict(arrays)
        for kind, row in (("keys", key), ("values", value)):
            for name, part in self._quantized(row, kind).items():
                written[name] = write_row(arrays[name], part, position)
        if self.slots:
            held = ring_positions(self.slots, position)
            recent = (held >= 0) & (held < position) & (held > position - self.fresh)
            index = jnp.where(recent, held, self.store)  # past the end: dropped
            keys = keys.at[:, :, index].set(arrays["keys"], mode="drop")
            values = values.at[:, :, index].set(arrays["values"], mode="drop")
            slot = jnp.mod(position, self.slots)
            written["keys"], written["values"] = write_row(arrays["keys"], key, slot), write_row(arrays["values"],
                                                                                              value, slot)
        segments = [Segment(keys, values, jnp.arange(self.store) < position)]
        return written, partial(step_attention, segments=segments, new_key=key, new_value=value)

    def extend(self, arrays: Arrays, keys: jax.Array, values: jax.Array,
               position: jax.Array) -> tuple[Arrays, Attend]:
        """W tokens at once, each reading what plain decoding would show it: the store (and the block's own
        tokens, quantized) up to `fresh` positions back, full precision after. Every token is quantized once,
        on its own, so the block's codes are the ones single steps would write."""
        width = keys.shape[2]
        queries = block_positions(position, width)  # (W,)
        cut = queries[:, None] - self.fresh  # (W, 1): the newest position each query reads from the store
        stored = jnp.arange(self.store)[None, :]
        segments = [Segment(self._read(arrays, "keys"), self._read(arrays, "values"),
                            (stored < position) & (stored <= cut))]
        written = dict(arrays)
        quantized = {}
        for kind, rows in (("keys", keys), ("values", values)):
            parts = self._quantized(rows, kind)
            for name, part in parts.items():
                written[name] = write_row(arrays[name], part, position)  # the plan leaves room for the block
            quantized[kind] = self._read(parts, kind)  # (B, KV, W, D) as the store will give them back
        if self.slots:
            held = ring_positions(self.slots, position - 1)  # (slots,) before the write
            segments.append(Segment(arrays["keys"], arrays["values"],
                                    (held >= 0) & (held < position) & (held[None, :] > cut)))
            slots = jnp.mod(queries, self.slots)
            written["keys"] = write_ring_rows(arrays["keys"], keys, slots)
            written["values"] = write_ring_rows(arrays["values"], values, slots)
        own = queries[None, :] <= queries[:, None]  # (W, W)
        segments.append(Segment(quantized["keys"], quantized["values"], own & (queries[None, :] <= cut)))
        segments.append(Segment(keys, values, own & (queries[None, :] > cut)))
        return written, partial(block_attention, segments=segments)

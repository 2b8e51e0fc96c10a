"""Attention in JAX over our cache layouts: the prompt over its own keys, one new token over cache segments.

Masks are computed here from absolute positions and each layer's layout (a window, a ring, sinks, a
quantized store), never from transformers' mask functions: a ring buffer's slots are not in position order,
so the only mask that is right for every layout is the one that knows which position each slot holds.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Segment(NamedTuple):
    """Cached keys and values new tokens attend over, and which of their slots each may see.

    One new token (step_attention): keys (B, KV, N, D), allowed (N,). A block of W new tokens (block_attention)
    may also give each its own mask, allowed (W, N), and its own keys, (B, KV, W, N, D): sinks rotated for
    each query's eviction count."""

    keys: jax.Array
    values: jax.Array  # (B, KV, N, D)
    allowed: jax.Array  # bool


def _softcapped(scores: jax.Array, softcap: float | None) -> jax.Array:
    return scores if softcap is None else jnp.tanh(scores / softcap) * softcap


def band_mask(length: int, window: int | None) -> jax.Array:
    """(T, T) query x key: causal, and within `window` positions (itself and the window - 1 before it)."""
    query, key = jnp.arange(length)[:, None], jnp.arange(length)[None, :]
    mask = key <= query
    return mask if window is None else mask & (query - key < window)


def prompt_attention(query: jax.Array, key: jax.Array, value: jax.Array, window: int | None, scaling: float,
                     softcap: float | None) -> jax.Array:
    """The prompt over its own keys (B, KV, T, D), grouped-query, without repeating K/V; returns (B, T, H, D)."""
    batch, heads, q_len, dim = query.shape  # (B, H, T, D)
    kv_heads = key.shape[1]
    groups = heads // kv_heads  # query head h reads kv head h // groups, as repeat_kv does
    rows = query.reshape(batch, kv_heads, groups * q_len, dim)  # (B, KV, M, D), m = g * T + t
    scores = _softcapped(jnp.einsum("bkmd,bksd->bkms", rows, key) * scaling, softcap)  # (B, KV, M, T)
    mask = jnp.tile(band_mask(q_len, window), (groups, 1))  # (M, T)
    probs = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
    out = jnp.einsum("bkms,bksd->bkmd", probs, value).reshape(batch, heads, q_len, dim)
    return out.transpose(0, 2, 1, 3)  # (B, T, H, D), as sdpa returns it


def step_attention(query: jax.Array, segments: list[Segment], new_key: jax.Array, new_value: jax.Array,
                   scaling: float, softcap: float | None) -> jax.Array:
    """One new token over cache segments read as they were *before* its write, plus its own key and value.

    Reading the updated arrays instead makes XLA copy every cache array on every step (the in-place write
    and the attention's product would share a buffer); this way the write is the arrays' last use. Each
    query group's products with the cache are matrix-vector products of their own: XLA runs those at bandwidth
    and side by side on the cores, where one small batched matrix product per layer runs on one core, far
    slower. Their scores are stacked, so the softmax between the products is one chain of element-wise kernels
    for all the groups: a chain per group gave SmolLM2's decode program 1630 kernels to compile instead of 1060,
    for the same tokens. The softmax runs over every segment's scores and the new token's at once (one running
    maximum).
    """
    batch, heads, _, dim = query.shape  # (B, H, 1, D)
    kv_heads = new_key.shape[1]
    groups = heads // kv_heads
    rows = query.reshape(batch, kv_heads, groups, dim).transpose(2, 0, 1, 3)  # (G, B, KV, D)
    scores = []  # (G, B, KV, N) per segment
    for segment in segments:
        raw = jnp.stack([jnp.einsum("bksd,bkd->bks", segment.keys, rows[g]) for g in range(groups)])
        scores.append(jnp.where(segment.allowed, _softcapped(raw * scaling, softcap), -jnp.inf))
    fresh = (rows * new_key[:, :, 0]).sum(axis=-1)  # (G, B, KV): element-wise, so one kernel for every group
    fresh = _softcapped(fresh * scaling, softcap)[..., None]  # (G, B, KV, 1)
    top = fresh
    for score in scores:
        top = jnp.maximum(top, score.max(axis=-1, keepdims=True))
    fresh_weight = jnp.exp(fresh - top)
    total = fresh_weight
    mixed = fresh_weight * new_value[:, :, 0]  # (G, B, KV, D)
    for score, segment in zip(scores, segments, strict=True):
        weights = jnp.exp(score - top)
        total = total + weights.sum(axis=-1, keepdims=True)
        mixed = mixed + jnp.stack([jnp.einsum("bks,bksd->bkd", weights[g], segment.values) for g in range(groups)])
    out = (mixed / total).transpose(1, 2, 0, 3).reshape(batch, heads, 1, dim)  # via (B, KV, G, D)
    return out.transpose(0, 2, 1, 3)  # (B, 1, H, D)


def ring_positions(slots: int, position: jax.Array) -> jax.Array:
    """(N,) the absolute position each slot of a ring of `slots` holds once `position` is written there at
    `position % slots`: the latest position <= `position` congruent to the slot; negative when never written."""
    return position - jnp.mod(position - jnp.arange(slots), slots)


def gather_ring(chunk: jax.Array, length: jax.Array, slots: int, first: int = 0) -> jax.Array:
    """The ring (B, KV, slots, D) a prompt chunk (B, KV, T, D) of true length `length` leaves behind, for a ring
    holding positions >= `first` at slot (p - first) % slots. Slots no position reached hold any finite value
    (their positions are negative, or below `first`, so every mask keeps them out)."""
    held = first + ring_positions(slots, length - 1 - first)  # (slots,)
    index = jnp.clip(held, 0, chunk.shape[2] - 1)
    return jnp.take(chunk, index, axis=2)


def block_attention(query: jax.Array, segments: list[Segment], scaling: float, softcap: float | None) -> jax.Array:
    """W new tokens (B, H, W, D) over segments (the cache read before their write, and their own keys), one
    softmax over all; returns (B, W, H, D). Grouped-query without repeating K/V: query head h reads kv head
    h // groups, and row m = g * W + w of a group is query w."""
    batch, heads, width, dim = query.shape
    kv_heads = segments[0].values.shape[1]
    groups = heads // kv_heads
    rows = query.reshape(batch, kv_heads, groups * width, dim)  # (B, KV, M, D)
    scores = []
    for s in segments:
        if s.keys.ndim == 5:  # a key row per query: (B, KV, W, N, D) -> (B, KV, M, N, D)
            raw = jnp.einsum("bkmd,bkmnd->bkmn", rows, jnp.tile(s.keys, (1, 1, groups, 1, 1)))
        else:
            raw = jnp.einsum("bkmd,bknd->bkmn", rows, s.keys)
        allowed = s.allowed if s.allowed.ndim == 1 else jnp.tile(  # (N,), or (W, N) -> (M, N)
            jnp.broadcast_to(s.allowed, (width, s.allowed.shape[-1])), (groups, 1))
        scores.append(jnp.where(allowed, _softcapped(raw * scaling, softcap), -jnp.inf))
    probs = jax.nn.softmax(jnp.concatenate(scores, axis=-1), axis=-1)  # (B, KV, M, sum N)
    values = jnp.concatenate([s.values for s in segments], axis=2)  # (B, KV, sum N, D)
    out = jnp.einsum("bkmn,bknd->bkmd", probs, values).reshape(batch, heads, width, dim)
    return out.transpose(0, 2, 1, 3)


def block_positions(position: jax.Array, width: int) -> jax.Array:
    """(W,) the positions a block of W new tokens is written at."""
    return position + jnp.arange(width, dtype=jnp.asarray(position).dtype)


def write_ring_rows(array: jax.Array, rows: jax.Array, slots: jax.Array) -> jax.Array:
    """Rows (B, KV, W, ...) written at their ring slots (W,), which may wrap past the end."""
    return array.at[:, :, slots].set(rows.astype(array.dtype))

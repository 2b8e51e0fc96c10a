"""Several new tokens at once over a filled cache: the verify pass of assisted decoding.

The main model checks a whole draft in one forward: the last token and the drafted ones are written at
consecutive positions and each attends over the cache as it was before the write plus the new tokens up to
itself (causal). Rejected drafts are rolled back by moving the layers' counters back: on a global ring that
never wraps, a slot past the counter is masked out of every later step and overwritten by the next write, so
rollback is exact and free. A ring that wraps (a sliding window), the sink cache and the quantized store would
lose what a rejected draft overwrote (or quantized), so they are refused (compatibility.py, assisted_plan).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from playground import registry
from playground.backends.jax.architectures import ROLLBACK_REFUSAL
from playground.backends.jax.attention import Segment, ring_positions
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.layout import Arrays, Attend, Layout, write_row
from playground.backends.jax.caches.plan import CachePlan
from playground.backends.jax.caches.ring import RingLayout
from playground.errors import PlaygroundError
from playground.spec import RunSpec


def assisted_plan(spec: RunSpec, config: Any, prompt_len: int, width: int) -> CachePlan:
    """The plain plan's layouts with room for one verify pass past max_new_tokens (a pass writes all its
    drafts before any is rejected); refuses layers whose rollback would not be exact."""
    plain = cache_plan.plan_cache(spec, config, prompt_len, width)
    total = spec.max_new_tokens + width
    lengths = cache_plan.cache_lengths(registry.cache_type(spec.cache), prompt_len, total, width)
    plan = CachePlan(tuple(layer.resized(lengths[0]) for layer in plain.layers), tuple(lengths))
    for length in lengths:
        if not all(can_extend(layer, length) for layer in plan.at(length)):
            raise PlaygroundError(ROLLBACK_REFUSAL)
    return plan


def can_extend(layout: Layout, length: int) -> bool:
    """Whether rollback over this layer is exact: a full-precision ring holding every position of the cache."""
    return isinstance(layout, RingLayout) and layout.window is None and layout.slots >= length


def block_attention(query: jax.Array, segments: list[Segment], new_keys: jax.Array, new_values: jax.Array,
                    scaling: float, softcap: float | None) -> jax.Array:
    """W new tokens (B, H, W, D) over cache segments (read before their write) plus their own keys, causally;
    returns (B, W, H, D). Grouped-query without repeating K/V: query head h reads kv head h // groups."""
    batch, heads, width, dim = query.shape
    kv_heads = new_keys.shape[1]
    groups = heads // kv_heads
    rows = query.reshape(batch, kv_heads, groups * width, dim)  # (B, KV, M, D), m = g * W + w

    def capped(scores: jax.Array) -> jax.Array:
        scores = scores * scaling
        return scores if softcap is None else jnp.tanh(scores / softcap) * softcap

    scores = [jnp.where(s.allowed, capped(jnp.einsum("bkmd,bksd->bkms", rows, s.keys)), -jnp.inf)
              for s in segments]  # (B, KV, M, N) each
    causal = jnp.tile(jnp.tril(jnp.ones((width, width), bool)), (groups, 1))  # (M, W)
    scores.append(jnp.where(causal, capped(jnp.einsum("bkmd,bksd->bkms", rows, new_keys)), -jnp.inf))
    probs = jax.nn.softmax(jnp.concatenate(scores, axis=-1), axis=-1)  # one softmax over every segment
    values = jnp.concatenate([s.values for s in segments] + [new_values], axis=2)  # (B, KV, N + W, D)
    out = jnp.einsum("bkms,bksd->bkmd", probs, values).reshape(batch, heads, width, dim)
    return out.transpose(0, 2, 1, 3)


def extend(layout: Layout, arrays: Arrays, keys: jax.Array, values: jax.Array,
           position: jax.Array) -> tuple[Arrays, Attend]:
    """Tokens (B, KV, W, D) at positions position..position + W - 1: the updated arrays and how they attend.
    The caller keeps position + W within the ring (write_row would clamp, not wrap)."""
    if not isinstance(layout, RingLayout) or layout.window is not None:
        raise PlaygroundError(f"a verify pass over a {type(layout).__name__} cannot be rolled back exactly")
    held = ring_positions(layout.slots, position)  # never wraps: slot s holds s below `position`
    seen = Segment(arrays["keys"], arrays["values"], (held >= 0) & (held < position))
    written = {"keys": write_row(arrays["keys"], keys, position), "values": write_row(arrays["values"], values,
                                                                                      position)}
    return written, partial(block_attention, segments=[seen], new_keys=keys, new_values=values)

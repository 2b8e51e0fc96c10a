"""The prompt into a new cache, in fixed-size chunks inside one program, so a long prompt's attention memory
grows with its keys and values, not with the square of its length.

A prompt bucket of at most CHUNK_TOKENS runs whole, as one forward (the short prompts every preset sends keep
their exact tokens and logits). A longer bucket runs as a `while_loop` over chunks, as many as the prompt's
true length needs (a bucket's padding past the last chunk is never computed); each chunk attends over the
keys and values the earlier ones wrote, through the layouts' `extend`, and writes its own.

The chunks run over staging layers that see the prompt as the whole-prompt forward does: every position in
full precision (rounded where the layer stores bf16, as its own prefill rounds them), causally, within the
layer's attention window (a sliding layer's; none for the others, as the sink and quantized layouts let a prompt
attend over all of itself). A global full-precision layer long enough
for the bucket is its own staging layer; every other layer stages the prompt in a full-precision ring of the
bucket's length, and its own layout is filled from that once the last chunk is in (its `prefill`, as from the
whole prompt's keys). So the sink, sliding and quantized caches hold the prompt's keys and values once during
the prefill, growing linearly with the prompt, and are bounded again when it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from playground.backends.jax.caches import pytree
from playground.backends.jax.caches.layout import Layout, nbytes
from playground.backends.jax.caches.pytree import JaxCache, JaxLayer
from playground.backends.jax.caches.ring import RingLayout
from playground.backends.jax.caches.sink import SinkLayout

# Prompt tokens per forward. At 512, SmolLM2's attention scores for one chunk over an 8192-token bucket are
# 160 MB per layer (fp32), against 2.4 GB for the whole prompt at once.
CHUNK_TOKENS = 512

# step(cache, ids (B, C), positions (1, C), keep (1,)) -> (outputs at row `keep`, per-row outputs (B, C, ...),
# the cache): one forward over a chunk. Either output is any pytree; the per-row one may be ().
ChunkStep = Callable[[JaxCache, jax.Array, jax.Array, jax.Array], tuple[Any, Any, JaxCache]]


def chunk_tokens() -> int:
    """Prompt tokens per forward (a program's key names it: a program built for one chunk size is not reused
    for another)."""
    return CHUNK_TOKENS


def staging(layout: Layout, bucket: int) -> Layout:
    """The layer the chunks run over: the layout itself where it is a global full-precision ring with room for
    the bucket, else a full-precision ring of the bucket with the layout's attention window, storing what the
    layout's own prefill attends over (`prompt_dtype`)."""
    if isinstance(layout, RingLayout) and layout.window is None and layout.slots >= bucket:
        return layout
    return RingLayout(layout.heads, layout.head_dim, slots=bucket, window=layout.window, dtype=prompt_dtype(layout))


def prompt_dtype(layout: Layout) -> str:
    """What a whole prompt's keys and values are, to its own attention, in `layout`'s prefill: a ring or a sink
    cache storing bf16 attends over them rounded (`layout.stored`), so the chunks must too, or a prompt past one
    chunk would differ from the same positions prefilled whole (or kept in the prefix store) by far more than the
    order of a sum: on SmolLM2 a bf16 step apart in 13% to 64% of a layer's keys and values, from layer 1 up. A
    quantized layout lets the prompt attend in full precision."""
    return layout.dtype if isinstance(layout, RingLayout | SinkLayout) else "float32"


def prefill(step: ChunkStep, ids: jax.Array, length: jax.Array, layouts: tuple[Layout, ...],
            constrain: Callable[[JaxCache], JaxCache] = lambda cache: cache) -> tuple[Any, Any, JaxCache]:
    """The prompt `ids` (B, bucket), padded on the right past its true `length`, into a new cache of `layouts`:
    (the step's outputs at the last real position, its per-row outputs over the bucket (B, bucket, ...), the
    cache, whose counters stand at `length`). Rows past the last chunk run hold zeros."""
    length = length.astype(jnp.int32)
    bucket, chunk = ids.shape[1], chunk_tokens()
    if bucket <= chunk:  # one forward over the whole bucket, written by each layout's own prefill
        positions = jnp.arange(bucket, dtype=jnp.int32)[None, :]
        at_last, rows, cache = step(pytree.empty_cache(layouts, length), ids, positions, (length - 1)[None])
        return at_last, rows, constrain(cache)
    if bucket % chunk:
        raise ValueError(f"a prompt bucket of {bucket} is not a whole number of {chunk}-token chunks")
    stages = tuple(staging(layout, bucket) for layout in layouts)
    batch = ids.shape[0]
    start_cache = _zeros(stages, batch)

    def forward(cache: JaxCache, start: jax.Array) -> tuple[Any, Any, JaxCache]:
        chunk_ids = jax.lax.dynamic_slice_in_dim(ids, start, chunk, axis=1)
        positions = (start + jnp.arange(chunk, dtype=jnp.int32))[None, :]
        keep = jnp.clip(length - 1 - start, 0, chunk - 1)[None]
        return step(cache, chunk_ids, positions, keep)

    at_last_shape, rows_shape, _ = jax.eval_shape(forward, start_cache, jnp.int32(0))
    at_last = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), at_last_shape)
    rows = jax.tree.map(lambda s: jnp.zeros((s.shape[0], bucket, *s.shape[2:]), s.dtype), rows_shape)
    chunks = (length + chunk - 1) // chunk

    def body(index: jax.Array, carry: tuple[JaxCache, Any, Any]) -> tuple[JaxCache, Any, Any]:
        cache, last, kept = carry
        start = index * chunk
        out_last, out_rows, cache = forward(cache, start)
        holds_last = (length - 1 >= start) & (length - 1 < start + chunk)
        last = jax.tree.map(lambda new, old: jnp.where(holds_last, new, old), out_last, last)
        kept = jax.tree.map(lambda buffer, part: jax.lax.dynamic_update_slice_in_dim(buffer, part, start, axis=1),
                            kept, out_rows)
        return constrain(cache), last, kept

    staged, at_last, rows = jax.lax.fori_loop(0, chunks, body, (start_cache, at_last, rows))
    return at_last, rows, constrain(_settled(staged, layouts, length))


def _zeros(layouts: tuple[Layout, ...], batch: int) -> JaxCache:
    """An empty cache with its arrays allocated (so every chunk, the first included, is written by `extend`)."""
    layers = []
    for layout in layouts:
        arrays = {name: jnp.zeros((batch, *shape), dtype) for name, (shape, dtype) in layout.leaves().items()}
        layers.append(JaxLayer(layout, arrays, jnp.zeros((), jnp.int32)))
    return JaxCache(layers)


def _settled(staged: JaxCache, layouts: tuple[Layout, ...], length: jax.Array) -> JaxCache:
    """The staged prompt in the request's layouts, every counter at the true length (decoding overwrites what
    the last chunk's padding left)."""
    layers = []
    for layer, layout in zip(staged.jax_layers, layouts, strict=True):
        arrays = layer.arrays
        if layer.layout != layout:  # a full-precision ring of the bucket: the layout takes it as a whole prompt
            arrays, _ = layout.prefill(arrays["keys"], arrays["values"], length)
        layers.append(JaxLayer(layout, arrays, length))
    return JaxCache(layers)


def working_bytes(layouts: tuple[Layout, ...], bucket: int, query_heads: int, batch: int = 1) -> int:
    """Bytes the prefill holds beyond the cache it leaves: the staging rings (the layers that are not their own
    staging layer), and one layer's attention scores and probabilities for a chunk over the bucket (the whole
    bucket over itself when it runs whole)."""
    chunk = chunk_tokens()
    rows, columns = (bucket, bucket) if bucket <= chunk else (chunk, bucket + chunk)
    scores = 2 * batch * query_heads * rows * columns * 4
    if bucket <= chunk:
        return scores
    staged = sum(nbytes(staging(layout, bucket), batch) for layout in layouts if staging(layout, bucket) != layout)
    return staged + scores

"""The prefix store on the JAX layouts that do not keep every position in full precision: the sliding ring (its
window), the sink layout (its sinks and a ring of recent tokens) and the quantized layout (every position quantized
once, and a ring of the newest in full precision).

A snapshot keeps each layer's arrays as they are (copied: the run's own are donated to its next program) with
their layout and the tokens written. A warm run lays them into the request's first layouts at the common prefix:
the arrays indexed by position (the quantized store) are padded or cut to the request's length, each ring is
gathered slot by slot from the position it must hold, and a cut (a partial match) is the same gather at an earlier
position. That works only where the entry still holds every position the next token reads: the window's, the
recent tokens', the full-precision residual's; otherwise the run is cold with the reason ("the window no longer
holds token 212"). The rest of the prompt then runs one token per step, as decoding continues these layouts
(a chunk over a ring narrower than itself would write over slots it still reads), in one program.

The steps see the kept window where a cold prompt attends over all of itself in full precision, so a warm run is
measured against the cold run of the same tokens afterwards (reuse_vs_cold.py), as on PyTorch.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from playground.backends.jax.caches.layout import Layout
from playground.backends.jax.caches.plan import Layouts
from playground.backends.jax.caches.pytree import JaxCache, JaxLayer
from playground.backends.jax.caches.quantized import QuantLayout
from playground.backends.jax.caches.ring import RingLayout
from playground.backends.jax.caches.sink import SinkLayout
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.model.attention import ring_positions
from playground.backends.prefix_store import Kept, Match


def restored(layouts: Layouts) -> bool:
    """Whether a cache of these layouts is kept whole (this module) rather than as global rings."""
    return any(not (isinstance(layout, RingLayout) and layout.window is None) for layout in layouts)


def snapshot(cache: JaxCache, ids: list[int]) -> Kept | None:
    """A copy of the first row of every layer as it is, with the ids it holds; None where it holds nothing."""
    written = int(jax.device_get(cache.jax_layers[0].cumulative_length))
    held = min(written, len(ids))
    if held <= 0:
        return None
    # the counter stays the tokens written: a ring may hold positions past the ids, which `blocker` must count
    layers = [JaxLayer(layer.layout, {name: jnp.copy(a[:1]) for name, a in layer.arrays.items()}, jnp.int32(written))
              for layer in cache.jax_layers]
    nbytes = sum(int(array.nbytes) for layer in layers for array in layer.arrays.values())
    return Kept(tuple(ids[:held]), JaxCache(layers), nbytes)


def _ring(layout: Layout) -> tuple[int, int, int | None]:
    """(the first position the ring holds, its slots, how many positions before a query it reads: None, all)."""
    if isinstance(layout, SinkLayout):
        return layout.sinks, layout.slots, layout.recent - 1
    if isinstance(layout, QuantLayout):
        return 0, layout.slots, layout.fresh - 1
    assert isinstance(layout, RingLayout)
    return 0, layout.slots, None if layout.window is None else layout.window - 1


def crop_blocker(layout: Layout, held: int, shared: int) -> str | None:
    """Why a layer holding `held` tokens in `layout` cannot continue at token `shared` (None: it can): the
    positions the next token reads that its ring has already overwritten."""
    first, slots, reads = _ring(layout)
    if isinstance(layout, QuantLayout) and not slots:
        return None  # no residual: the store holds every position
    oldest_kept = max(first, held - slots)
    oldest_read = max(first, shared - (shared if reads is None else reads))
    if oldest_read >= oldest_kept or oldest_read >= shared:
        return None
    what = {SinkLayout: "the sink cache's recent ring", QuantLayout: "the full-precision residual"}
    return f"{what.get(type(layout), 'the window')} no longer holds token {oldest_read}"


def blocker(match: Match) -> str | None:
    """Why the entry cannot be continued at its common prefix, for the first layer that cannot."""
    for layer in match.entry.snapshot.jax_layers:
        reason = crop_blocker(layer.layout, int(jax.device_get(layer.cumulative_length)), match.shared)
        if reason is not None:
            return reason
    return None


def laid_out(layer: JaxLayer, layout: Layout, shared: jax.Array) -> dict[str, jax.Array]:
    """The kept layer's arrays in the request's `layout`, as a run that stopped at `shared` would have left them."""
    first, slots, _ = _ring(layer.layout)
    _, target, _ = _ring(layout)
    arrays = {}
    for name, (shape, _) in layout.leaves().items():
        array = layer.arrays[name]
        if name in ("keys", "values"):  # a ring: slot s of the target holds position p, kept at (p - first) % slots
            wanted = first + ring_positions(target, shared - 1 - first)  # (target,)
            index = jnp.mod(wanted - first, slots) if slots else jnp.zeros_like(wanted)
            arrays[name] = jnp.take(array, index, axis=2)
        elif name.startswith("sink_"):
            arrays[name] = array
        else:  # the quantized store, by position: padded or cut to the request's length
            now = array.shape[2]
            arrays[name] = array[:, :, : shape[1]] if now >= shape[1] else jnp.pad(
                array, [(0, 0), (0, 0), (0, shape[1] - now), (0, 0)])
    return arrays


def resume_program(engine: Engine, kept: Layouts, bucket: int, layouts: Layouts) -> Pending:
    """`(weights, kept cache, suffix ids (1, bucket), shared, suffix length) -> (logits (1, V), cache)` in
    `layouts`: an entry of the `kept` layouts laid out at `shared`, then the suffix one step per token (`bucket`:
    the suffix's padded length, prefix_reuse.suffix_bucket)."""
    shape = engine.shape_struct

    def lower() -> Any:
        fn = jax.jit(partial(_resume, engine, layouts=layouts))
        return fn.lower(engine.weights, engine.abstract_cache(kept, 1), shape((1, bucket), jnp.int32),
                        shape((), jnp.int32), shape((), jnp.int32))

    return engine.program(("resume-steps", kept, bucket, layouts), lower)


def _resume(engine: Engine, weights: dict, kept: JaxCache, ids: jax.Array, shared: jax.Array, length: jax.Array,
            *, layouts: Layouts) -> tuple[jax.Array, JaxCache]:
    """The kept layers laid out at `shared`, then `length` suffix tokens, one forward each."""
    layers = [JaxLayer(layout, laid_out(layer, layout, shared), shared)
              for layer, layout in zip(kept.jax_layers, layouts, strict=True)]

    def body(index: jax.Array, carry: tuple[jax.Array, JaxCache]) -> tuple[jax.Array, JaxCache]:
        _, cache = carry
        token = jax.lax.dynamic_slice_in_dim(ids, index, 1, axis=1)  # (1, 1)
        logits, cache = engine.forward(weights, cache, token, (shared + index)[None, None], 0)
        return logits[:, -1].astype(jnp.float32), engine.constrain(cache)

    empty = jnp.zeros((ids.shape[0], engine.vocab_size), jnp.float32)
    logits, cache = jax.lax.fori_loop(0, length, body, (empty, JaxCache(layers)))
    return logits, engine.constrain(cache)

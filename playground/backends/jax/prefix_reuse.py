"""The JAX path's side of the prefix store: which runs may start from a kept cache, the snapshot of a finished
run's cache, and the program that continues a kept cache over a new prompt's suffix.

A snapshot is each layer's keys and values of the first row (device arrays, copied: the run's own arrays are
donated to the next program that takes them), cut to a power-of-two number of slots that holds the positions the
run filled, so that its shape keys few programs. A warm run's prefill is the `resume` program: it
pads (or cuts) the kept arrays into a working ring long enough for the common prefix and the suffix's bucket, sets
every counter at the common prefix (what the entry holds past it is masked and then overwritten, as after a
rejected draft), runs the suffix, padded on the right to its own bucket, through the layouts' `extend` in the
prefill's chunks (the chunked prefill's continuation over a filled cache), and hands back the last real position's
logits and the cache in the request's first layouts. The entry is an input of a program that donates nothing, so a
warm run never overwrites it.

Global full-precision layers (the dynamic and static caches, in float32 or the bf16 store) are kept this way; the
sliding, sink and quantized layouts are kept whole and continued one token per step (restored_reuse.py), under
plain decoding on one device; the rest prefills the whole prompt, with the reason.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from playground.backends.jax import restored_reuse
from playground.backends.jax.caches.layout import Layout
from playground.backends.jax.caches.plan import Layouts, prefill_bucket
from playground.backends.jax.caches.pytree import JaxCache, JaxLayer
from playground.backends.jax.caches.ring import RingLayout
from playground.backends.jax.engine import prefill
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.prefix_store import RESTORED_CACHES, Kept, Match, cold_reason
from playground.spec import RunSpec


def refusal(spec: RunSpec, config: Any) -> str | None:
    """Why this JAX run cannot start from (or leave) a kept cache, in one line; None when it can."""
    reason = cold_reason(spec.strategy, spec.cache, backend="jax", assistant=spec.assistant)
    if reason is not None:
        return reason
    if spec.devices > 1:
        return "the JAX path keeps its cache on one device only; a run over several prefills the whole prompt"
    if spec.cache in RESTORED_CACHES:  # kept whole, whatever its layers (restored_reuse.py)
        return None
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return f"{spec.model}'s sliding layers keep only their window, so a kept cache could not be cropped"
    return None


def snapshot(cache: JaxCache, ids: list[int], whole: bool = False) -> Kept | None:
    """A copy of the first row's filled positions (cut to a power of two of slots; `whole`: every slot, as a branch
    tree's step keeps it, so that the next step's resume program is the one its first step asked for), with the ids
    they hold (`ids`: the prompt and the new tokens); None where it holds nothing. A cache kept whole
    (restored_reuse.py) keeps every slot either way."""
    if restored_reuse.restored(cache.layouts):
        return restored_reuse.snapshot(cache, ids)
    held = min(int(jax.device_get(cache.jax_layers[0].cumulative_length)), len(ids))
    if held <= 0:
        return None
    layers, nbytes = [], 0
    for layer in cache.jax_layers:
        layout = _ring(layer.layout)
        slots = layout.slots if whole else min(layout.slots, prefill_bucket(held))
        arrays = {name: jnp.copy(array[:1, :, :slots]) for name, array in layer.arrays.items()}
        layers.append(JaxLayer(dataclasses.replace(layout, slots=slots), arrays, jnp.int32(held)))
        nbytes += sum(int(a.nbytes) for a in arrays.values())
    return Kept(tuple(ids[:held]), JaxCache(layers), nbytes)


def resume_program(engine: Engine, match: Match, prompt_len: int, layouts: Layouts) -> Pending:
    """The program that continues `match`'s entry over the rest of a `prompt_len`-token prompt, into `layouts`
    (the request's first): `(weights, kept cache, suffix ids (1, bucket), shared, suffix length) -> (logits
    (1, V), cache)`. Keyed by the entry's layouts, the suffix's bucket and the working length (powers of two, or
    the layouts' own length), never by the ids."""
    kept: JaxCache = match.entry.snapshot
    bucket = suffix_bucket(match, prompt_len)
    if restored_reuse.restored(kept.layouts):
        return restored_reuse.resume_program(engine, kept.layouts, bucket, layouts)
    return _program(engine, kept.layouts, bucket, _work_slots(match.shared, bucket, layouts), layouts)


def next_step_program(engine: Engine, layouts: Layouts) -> Pending:
    """The resume program every later step of a branch tree runs (a one-id suffix over a `whole` snapshot of these
    layouts, the tree's one cache length): the tree's first step asks for it, so no later step compiles. A cache
    kept whole continues in its own layouts, which are the tree's one length too."""
    if restored_reuse.restored(layouts):
        return restored_reuse.resume_program(engine, layouts, 1, layouts)
    return _program(engine, layouts, 1, max(_ring(layout).slots for layout in layouts), layouts)


def _program(engine: Engine, kept: Layouts, bucket: int, work: int, layouts: Layouts) -> Pending:
    shape = engine.shape_struct

    def lower() -> Any:
        fn = jax.jit(partial(_resume, engine, work=work, layouts=layouts))
        return fn.lower(engine.weights, engine.abstract_cache(kept, 1), shape((1, bucket), jnp.int32),
                        shape((), jnp.int32), shape((), jnp.int32))

    return engine.program(("resume", kept, bucket, prefill.chunk_tokens(), work, layouts), lower)


def run_resume(engine: Engine, program: Pending, match: Match, prompt: np.ndarray) -> tuple[jax.Array, JaxCache]:
    """The prompt's ids past the common prefix through `program`: the last logits and the request's cache."""
    suffix = prompt[:, match.shared:]
    padded = np.zeros((1, suffix_bucket(match, prompt.shape[1])), np.int32)
    padded[:, : suffix.shape[1]] = suffix
    return program(engine.weights, match.entry.snapshot, engine.put(padded), engine.put(np.int32(match.shared)),
                   engine.put(np.int32(suffix.shape[1])))


def suffix_bucket(match: Match, prompt_len: int) -> int:
    """The suffix padded as a prompt is: a power of two (a whole number of prefill chunks past one chunk); one id
    (a branch tree's step) as it is, a decode step's shape."""
    length = prompt_len - match.shared
    return 1 if length == 1 else prefill_bucket(length)


def _work_slots(shared: int, suffix_bucket: int, layouts: Layouts) -> int:
    """A ring long enough for the common prefix and the whole padded suffix (the padding must not wrap onto the
    prefix), and for the request's first layouts: their own length where that holds both, else a power of two."""
    longest = max(_ring(layout).slots for layout in layouts)
    return longest if shared + suffix_bucket <= longest else max(longest, prefill_bucket(shared + suffix_bucket))


def _ring(layout: Layout) -> RingLayout:
    """A kept or resumed layer's layout: a global full-precision ring (the only one refusal() lets through)."""
    assert isinstance(layout, RingLayout) and layout.window is None, "only global rings are kept"
    return layout


def _resume(engine: Engine, weights: dict, kept: JaxCache, ids: jax.Array, shared: jax.Array, length: jax.Array,
            *, work: int, layouts: Layouts) -> tuple[jax.Array, JaxCache]:
    """The suffix in chunks of the prefill's size (a long suffix's attention memory grows with its keys, not with
    its square), each `extend`ing the working ring from the counter the chunk before it left."""
    layers = []
    for layer in kept.jax_layers:
        layout = dataclasses.replace(_ring(layer.layout), slots=work)
        layers.append(JaxLayer(layout, {name: _slots(a, work) for name, a in layer.arrays.items()}, shared))
    chunk = min(ids.shape[1], prefill.chunk_tokens())

    def body(index: jax.Array, carry: tuple[jax.Array, JaxCache]) -> tuple[jax.Array, JaxCache]:
        last, cache = carry
        start = index * chunk
        positions = (shared + start + jnp.arange(chunk, dtype=jnp.int32))[None, :]
        keep = jnp.clip(length - 1 - start, 0, chunk - 1)[None]
        chunk_ids = jax.lax.dynamic_slice_in_dim(ids, start, chunk, axis=1)
        logits, cache = engine.forward(weights, cache, chunk_ids, positions, keep)
        holds_last = (length - 1 >= start) & (length - 1 < start + chunk)
        return jnp.where(holds_last, logits[:, -1].astype(jnp.float32), last), engine.constrain(cache)

    empty = jnp.zeros((ids.shape[0], engine.vocab_size), jnp.float32)
    logits, cache = jax.lax.fori_loop(0, (length + chunk - 1) // chunk, body, (empty, JaxCache(layers)))
    settled = [JaxLayer(layout, {name: _slots(a, _ring(layout).slots) for name, a in layer.arrays.items()},
                        shared + length) for layer, layout in zip(cache.jax_layers, layouts, strict=True)]
    return logits, engine.constrain(JaxCache(settled))


def _slots(array: jax.Array, slots: int) -> jax.Array:
    """`array` (B, KV, S, D) with `slots` slots: cut, or padded with empty ones at the end."""
    now = array.shape[2]
    if now >= slots:
        return array[:, :, :slots]
    return jnp.pad(array, [(0, 0), (0, 0), (0, slots - now), (0, 0)])


def usable(match: Match | None) -> tuple[Match | None, str | None]:
    """The match a run may start from, and the reason where an entry kept whole cannot continue at its common
    prefix (the run is then cold)."""
    if match is None or not restored_reuse.restored(match.entry.snapshot.layouts):
        return match, None
    reason = restored_reuse.blocker(match)
    return (None, reason) if reason is not None else (match, None)


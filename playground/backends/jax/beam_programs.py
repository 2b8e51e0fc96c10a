"""The compiled programs of a JAX beam search, built on a model's Engine: start, decode chunk, grow.

The K hypotheses are the batch of one traced forward. After each step the cache's rows are gathered by the
chosen parents inside jit (every cache array is (batch, KV heads, slots, ...), so one gather on axis 0 reorders
every layout: rings, sinks, quantized stores and their scales), never through the host. The prompt is prefilled
once, with batch 1 (the engine's own prefill program), and its cache rows repeated K times when the search
starts. Programs are kept in the engine's registry under their static key, so a repeated request compiles
nothing.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.stages import Lowered

from playground.backends.jax import beam_search, chain
from playground.backends.jax.beam_search import BeamKnobs, BeamMode, Hypotheses, StepRecord
from playground.backends.jax.caches import pytree
from playground.backends.jax.caches.plan import Layouts
from playground.backends.jax.caches.pytree import JaxCache, JaxLayer
from playground.backends.jax.chain import start_history
from playground.backends.jax.compiling import Pending
from playground.backends.jax.engine import Engine


@dataclasses.dataclass(frozen=True)
class BeamState:
    """What a beam decode call carries to the next (device arrays; shape structs when lowering)."""

    cache: JaxCache  # K rows, one per running beam
    tokens: Any  # (K,) each running beam's last token, not yet in the cache
    position: Any  # () its position
    hyps: Hypotheses[Any]
    key: Any  # (2,) uint32: beam sampling's random stream (and a drawing chain stage's)


jax.tree_util.register_dataclass(BeamState, data_fields=["cache", "tokens", "position", "hyps", "key"],
                                 meta_fields=[])


def reorder(cache: JaxCache, rows: jax.Array) -> JaxCache:
    """The cache with its batch rows gathered: row i becomes old row rows[i] (counters are shared by all rows)."""
    return JaxCache([JaxLayer(layer.layout, {name: jnp.take(a, rows, axis=0) for name, a in layer.arrays.items()},
                              layer.cumulative_length) for layer in cache.jax_layers])


def _pin(engine: Engine, state: BeamState) -> BeamState:
    """On a mesh: the cache split by KV heads, everything else replicated, call after call."""
    if engine.mesh is None:
        return state
    replicated = engine.replicated()
    small = jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, replicated),
                         (state.tokens, state.position, state.hyps, state.key))
    return BeamState(engine.constrain(state.cache), *small)


def _start(engine: Engine, logits: jax.Array, ids: jax.Array, length: jax.Array, key: jax.Array,
           knobs: BeamKnobs[jax.Array], cache: JaxCache, *, mode: BeamMode) -> tuple[BeamState, StepRecord]:
    """The first step from the prompt's logits (1, V): the prompt's cache repeated for K beams. Every beam holds
    the prompt, so the first step's parents (beam 0, or the beams left at their start score when fewer than K
    continuations are allowed: a constraint's) all read row 0."""
    hyps = beam_search.initial(start_history(ids, length, mode.chain.needs, engine.vocab_size), mode)
    logits = jnp.broadcast_to(logits, (mode.beams, logits.shape[-1]))
    hyps, parents, tokens, record, key = beam_search.step(logits, hyps, mode, knobs, key)
    cache = reorder(cache, jnp.zeros_like(parents))
    return _pin(engine, BeamState(cache, tokens, length.astype(jnp.int32), hyps, key)), record


def _decode(engine: Engine, weights: dict, state: BeamState, limit: jax.Array, knobs: BeamKnobs[jax.Array], *,
            steps: int, mode: BeamMode) -> tuple[BeamState, StepRecord, jax.Array]:
    """Up to `limit` (<= steps) beam steps in one call, ending early when the search is over. Returns the state,
    the steps' records (the first `count` rows are this call's) and count."""

    def cond(carry: tuple) -> jax.Array:
        i, s, _ = carry
        return (i < limit) & ~s.hyps.done

    def body(carry: tuple) -> tuple:
        i, s, out = carry
        positions = jnp.broadcast_to(s.position, (mode.beams, 1))
        logits, cache = engine.forward(weights, s.cache, s.tokens[:, None], positions, 1)
        hyps, parents, tokens, record, key = beam_search.step(logits[:, -1], s.hyps, mode, knobs, s.key)
        out = jax.tree.map(lambda rows, row: rows.at[i].set(row), out, record)
        s = BeamState(reorder(cache, parents), tokens, s.position + 1, hyps, key)
        return i + 1, _pin(engine, s), out

    out = beam_search.empty_records(steps, mode)
    count, state, out = jax.lax.while_loop(cond, body, (jnp.int32(0), state, out))
    return state, out, count


def _grow(engine: Engine, state: BeamState, *, layouts: Layouts) -> BeamState:
    """The same search over a larger cache (empty slots appended)."""
    return _pin(engine, dataclasses.replace(state, cache=pytree.grown(state.cache, layouts)))


def knob_specs(engine: Engine, mode: BeamMode) -> BeamKnobs[jax.ShapeDtypeStruct]:
    """Abstract search knobs for lowering, laid out as put() lays out the real ones."""
    i32 = engine.shape_struct((), jnp.int32)
    return BeamKnobs(engine.shape_struct((), jnp.float32), engine.shape_struct((), jnp.bool_), i32,
                     jax.tree.map(lambda s: engine.shape_struct(s.shape, s.dtype), chain.arg_specs(mode.chain)))


def _abstract_state(engine: Engine, layouts: Layouts, mode: BeamMode) -> BeamState:
    """Shape structs of a BeamState, laid out as the programs leave it."""
    shape = engine.shape_struct
    k, cols, i32 = mode.beams, mode.capacity, jnp.int32
    history = jax.tree.map(lambda s: shape(s.shape, s.dtype),
                           chain.history_shapes(mode.chain.needs, k, engine.vocab_size))
    hyps = Hypotheses(shape((k, cols), i32), shape((k,), jnp.float32), shape((k, cols), i32),
                      shape((k,), jnp.float32), shape((k,), i32), shape((k,), jnp.bool_),
                      shape((), jnp.bool_), history, shape((), i32), shape((), jnp.bool_))
    return BeamState(engine.abstract_cache(layouts, k), shape((k,), i32), shape((), i32), hyps,
                     shape((2,), jnp.uint32))


def start_program(engine: Engine, bucket: int, layouts: Layouts, mode: BeamMode) -> Pending:
    shape = engine.shape_struct

    def lower() -> Lowered:
        fn = jax.jit(partial(_start, engine, mode=mode))
        return fn.lower(shape((1, engine.vocab_size), jnp.float32), shape((1, bucket), jnp.int32),
                        shape((), jnp.int32), shape((2,), jnp.uint32), knob_specs(engine, mode),
                        engine.abstract_cache(layouts, 1))

    return engine.program(("beam-start", bucket, layouts, mode), lower)


def decode_program(engine: Engine, layouts: Layouts, steps: int, mode: BeamMode) -> Pending:
    def lower() -> Lowered:
        fn = jax.jit(partial(_decode, engine, steps=steps, mode=mode), donate_argnames=("state",))
        return fn.lower(engine.weights, _abstract_state(engine, layouts, mode), engine.shape_struct((), jnp.int32),
                        knob_specs(engine, mode))

    return engine.program(("beam-decode", layouts, steps, mode), lower)


def grow_program(engine: Engine, old: Layouts, new: Layouts, mode: BeamMode) -> Pending:
    def lower() -> Lowered:
        fn = jax.jit(partial(_grow, engine, layouts=new))  # new, larger buffers: nothing to donate
        return fn.lower(_abstract_state(engine, old, mode))

    return engine.program(("beam-grow", old, new, mode), lower)

"""The compiled programs of a JAX diverse (group) beam search, built on a model's Engine: start, decode chunk, grow.

As beam_programs.py does for beam search: all K rows of every group are the batch of one traced forward, and
after each step the cache's rows are gathered by the chosen parent rows inside jit (`reorder`: one gather on
the batch axis moves every layout, rings, sinks and quantized stores with their scales). A group's rows only
ever take parents of their own group, and a done group's rows all copy its first row, as 4.52 reordered them.
The prompt is prefilled once (batch 1) and its rows repeated K times when the search starts.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.stages import Lowered

from playground.backends.jax import chain, group_beam_search
from playground.backends.jax.beam_programs import reorder
from playground.backends.jax.caches import pytree
from playground.backends.jax.caches.plan import Layouts
from playground.backends.jax.caches.pytree import JaxCache
from playground.backends.jax.chain import start_history
from playground.backends.jax.compiling import Pending
from playground.backends.jax.engine import Engine
from playground.backends.jax.group_beam_search import GroupHyps, GroupKnobs, GroupMode, GroupRecord


@dataclasses.dataclass(frozen=True)
class GroupState:
    """What a group beam decode call carries to the next (device arrays; shape structs when lowering)."""

    cache: JaxCache  # K rows, one per beam of every group
    tokens: Any  # (K,) each row's last token, not yet in the cache
    position: Any  # () its position
    hyps: GroupHyps[Any]


jax.tree_util.register_dataclass(GroupState, data_fields=["cache", "tokens", "position", "hyps"], meta_fields=[])


def _pin(engine: Engine, state: GroupState) -> GroupState:
    """On a mesh: the cache split by KV heads, everything else replicated, call after call."""
    if engine.mesh is None:
        return state
    replicated = engine.replicated()
    small = jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, replicated),
                         (state.tokens, state.position, state.hyps))
    return GroupState(engine.constrain(state.cache), *small)


def _start(engine: Engine, logits: jax.Array, ids: jax.Array, length: jax.Array, knobs: GroupKnobs[jax.Array],
           cache: JaxCache, *, mode: GroupMode) -> tuple[GroupState, GroupRecord]:
    """The first step from the prompt's logits (1, V), every row the prompt's; its record with a step axis of 1."""
    hyps = group_beam_search.initial(start_history(ids, length, mode.chain.needs, engine.vocab_size), mode)
    logits = jnp.broadcast_to(logits, (mode.beams, logits.shape[-1]))
    hyps, parents, tokens, record = group_beam_search.step(logits, hyps, mode, knobs)
    cache = reorder(cache, jnp.zeros_like(parents))
    state = GroupState(cache, tokens, length.astype(jnp.int32), hyps)
    return _pin(engine, state), jax.tree.map(lambda a: a[None], record)


def _decode(engine: Engine, weights: dict, state: GroupState, limit: jax.Array, knobs: GroupKnobs[jax.Array], *,
            steps: int, mode: GroupMode) -> tuple[GroupState, GroupRecord, jax.Array]:
    """Up to `limit` (<= steps) steps in one call, ending early when every group is done. Returns the state,
    the steps' records (the first `count` rows are this call's) and count."""

    def cond(carry: tuple) -> jax.Array:
        i, s, _ = carry
        return (i < limit) & ~s.hyps.done

    def body(carry: tuple) -> tuple:
        i, s, out = carry
        positions = jnp.broadcast_to(s.position, (mode.beams, 1))
        logits, cache = engine.forward(weights, s.cache, s.tokens[:, None], positions, 1)
        hyps, parents, tokens, record = group_beam_search.step(logits[:, -1], s.hyps, mode, knobs)
        out = jax.tree.map(lambda rows, row: rows.at[i].set(row), out, record)
        s = GroupState(reorder(cache, parents), tokens, s.position + 1, hyps)
        return i + 1, _pin(engine, s), out

    out = group_beam_search.empty_records(steps, mode)
    count, state, out = jax.lax.while_loop(cond, body, (jnp.int32(0), state, out))
    return state, out, count


def _grow(engine: Engine, state: GroupState, *, layouts: Layouts) -> GroupState:
    """The same search over a larger cache (empty slots appended)."""
    return _pin(engine, dataclasses.replace(state, cache=pytree.grown(state.cache, layouts)))


def knob_specs(engine: Engine, mode: GroupMode) -> GroupKnobs[jax.ShapeDtypeStruct]:
    """Abstract search knobs for lowering, laid out as put() lays out the real ones."""
    f32 = engine.shape_struct((), jnp.float32)
    return GroupKnobs(f32, engine.shape_struct((), jnp.bool_), f32,
                      jax.tree.map(lambda s: engine.shape_struct(s.shape, s.dtype), chain.arg_specs(mode.chain)))


def _abstract_state(engine: Engine, layouts: Layouts, mode: GroupMode) -> GroupState:
    """Shape structs of a GroupState, laid out as the programs leave it (the hypotheses' from `initial`)."""
    shape = engine.shape_struct
    prompt = chain.history_shapes(mode.chain.needs, 1, engine.vocab_size)
    hyps = jax.eval_shape(lambda history: group_beam_search.initial(history, mode), prompt)
    hyps = jax.tree.map(lambda s: shape(s.shape, s.dtype), hyps)
    k = mode.beams
    return GroupState(engine.abstract_cache(layouts, k), shape((k,), jnp.int32), shape((), jnp.int32),
                      hyps)


def start_program(engine: Engine, bucket: int, layouts: Layouts, mode: GroupMode) -> Pending:
    shape = engine.shape_struct

    def lower() -> Lowered:
        fn = jax.jit(partial(_start, engine, mode=mode))
        return fn.lower(shape((1, engine.vocab_size), jnp.float32), shape((1, bucket), jnp.int32),
                        shape((), jnp.int32), knob_specs(engine, mode), engine.abstract_cache(layouts, 1))

    return engine.program(("group-beam-start", bucket, layouts, mode), lower)


def decode_program(engine: Engine, layouts: Layouts, steps: int, mode: GroupMode) -> Pending:
    def lower() -> Lowered:
        fn = jax.jit(partial(_decode, engine, steps=steps, mode=mode), donate_argnames=("state",))
        return fn.lower(engine.weights, _abstract_state(engine, layouts, mode), engine.shape_struct((), jnp.int32),
                        knob_specs(engine, mode))

    return engine.program(("group-beam-decode", layouts, steps, mode), lower)


def grow_program(engine: Engine, old: Layouts, new: Layouts, mode: GroupMode) -> Pending:
    def lower() -> Lowered:
        fn = jax.jit(partial(_grow, engine, layouts=new))  # new, larger buffers: nothing to donate
        return fn.lower(_abstract_state(engine, old, mode))

    return engine.program(("group-beam-grow", old, new, mode), lower)

"""A JAX diverse (group) beam search on the device: its state, start and step functions, whose programs the kernel
builds.

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

from playground.backends.jax.caches.pytree import JaxCache
from playground.backends.jax.chain import chain
from playground.backends.jax.chain.chain import start_history
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.engine.kernel import Kernel, abstract
from playground.backends.jax.strategies import diverse_beam_search
from playground.backends.jax.strategies.beam_programs import reorder
from playground.backends.jax.strategies.diverse_beam_search import (
    DiverseBeamArgs,
    DiverseBeamMode,
    GroupHyps,
    GroupRecord,
)


@dataclasses.dataclass(frozen=True)
class DiverseBeamState:
    """What a group beam decode call carries to the next (device arrays; shape structs when lowering)."""

    cache: JaxCache  # K rows, one per beam of every group
    tokens: Any  # (K,) each row's last token, not yet in the cache
    position: Any  # () its position
    hyps: GroupHyps[Any]


jax.tree_util.register_dataclass(DiverseBeamState, data_fields=["cache", "tokens", "position", "hyps"], meta_fields=[])


def start(vocab_size: int, mode: DiverseBeamMode, logits: jax.Array, ids: jax.Array, length: jax.Array,
          key: jax.Array, args: DiverseBeamArgs[jax.Array], cache: JaxCache) -> tuple[DiverseBeamState, GroupRecord]:
    """The first step from the prompt's logits (1, V), every row the prompt's; its record with a step axis of 1
    (the search draws nothing: `key` is unused)."""
    hyps = diverse_beam_search.initial(start_history(ids, length, mode.chain.needs, vocab_size), mode)
    logits = jnp.broadcast_to(logits, (mode.beams, logits.shape[-1]))
    hyps, parents, tokens, record = diverse_beam_search.step(logits, hyps, mode, args)
    cache = reorder(cache, jnp.zeros_like(parents))
    return DiverseBeamState(cache, tokens, length.astype(jnp.int32), hyps), jax.tree.map(lambda a: a[None], record)


def step(engine: Engine, mode: DiverseBeamMode, weights: dict, s: DiverseBeamState,
         args: DiverseBeamArgs[jax.Array]) -> tuple[DiverseBeamState, GroupRecord]:
    """One step of every group: the K rows' forward, the groups in turn, the cache reordered by parent rows."""
    positions = jnp.broadcast_to(s.position, (mode.beams, 1))
    logits, cache = engine.forward(weights, s.cache, s.tokens[:, None], positions, 1)
    hyps, parents, tokens, record = diverse_beam_search.step(logits[:, -1], s.hyps, mode, args)
    return DiverseBeamState(reorder(cache, parents), tokens, s.position + 1, hyps), record


def finished(state: DiverseBeamState) -> jax.Array:
    return state.hyps.done


def diverse_beam_kernel(engine: Engine, bucket: int, mode: DiverseBeamMode) -> Kernel[DiverseBeamState]:
    """The search's programs: K rows from the start on."""
    f32 = engine.shape_struct((), jnp.float32)
    args = DiverseBeamArgs(f32, engine.shape_struct((), jnp.bool_), f32, abstract(engine, chain.arg_specs(mode.chain)))
    return Kernel(engine=engine, name="diverse_beam", mode=mode, bucket=bucket,
                  start=partial(start, engine.vocab_size, mode), step=partial(step, engine, mode),
                  empty=partial(diverse_beam_search.empty_records, mode=mode), finished=finished, args=args,
                  rows=mode.beams)

"""A JAX beam search on the device: its state, start and step functions, whose programs the kernel builds.

The K hypotheses are the batch of one traced forward. After each step the cache's rows are gathered by the
chosen parents inside jit (every cache array is (batch, KV heads, slots, ...), so one gather on axis 0 reorders
every layout: rings, sinks, quantized stores and their scales), never through the host. The prompt is prefilled
once, with batch 1 (the engine's own prefill program), and its cache rows repeated K times when the search
starts.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from playground.backends.jax.caches.pytree import JaxCache, JaxLayer
from playground.backends.jax.chain import chain
from playground.backends.jax.chain.chain import start_history
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.engine.kernel import Kernel, abstract
from playground.backends.jax.strategies import beam_search
from playground.backends.jax.strategies.beam_search import BeamArgs, BeamMode, Hypotheses, StepRecord


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


def start(vocab_size: int, mode: BeamMode, logits: jax.Array, ids: jax.Array, length: jax.Array, key: jax.Array,
          args: BeamArgs[jax.Array], cache: JaxCache) -> tuple[BeamState, StepRecord]:
    """The first step from the prompt's logits (1, V): the prompt's cache repeated for K beams. Every beam holds
    the prompt, so the first step's parents (beam 0, or the beams left at their start score when fewer than K
    continuations are allowed: a constraint's) all read row 0."""
    hyps = beam_search.initial(start_history(ids, length, mode.chain.needs, vocab_size), mode)
    logits = jnp.broadcast_to(logits, (mode.beams, logits.shape[-1]))
    hyps, parents, tokens, record, key = beam_search.step(logits, hyps, mode, args, key)
    cache = reorder(cache, jnp.zeros_like(parents))
    return BeamState(cache, tokens, length.astype(jnp.int32), hyps, key), record


def step(engine: Engine, mode: BeamMode, weights: dict, s: BeamState,
         args: BeamArgs[jax.Array]) -> tuple[BeamState, StepRecord]:
    """One beam step: the K beams' forward, the search's step, the cache reordered by the chosen parents."""
    positions = jnp.broadcast_to(s.position, (mode.beams, 1))
    logits, cache = engine.forward(weights, s.cache, s.tokens[:, None], positions, 1)
    hyps, parents, tokens, record, key = beam_search.step(logits[:, -1], s.hyps, mode, args, s.key)
    return BeamState(reorder(cache, parents), tokens, s.position + 1, hyps, key), record


def finished(state: BeamState) -> jax.Array:
    return state.hyps.done


def beam_kernel(engine: Engine, bucket: int, mode: BeamMode) -> Kernel[BeamState]:
    """The search's programs: K rows from the start on, keyed by the registry's name of the search they run (beam
    search, or beam sampling where the continuations are drawn)."""
    shape = engine.shape_struct
    args = BeamArgs(shape((), jnp.float32), shape((), jnp.bool_), shape((), jnp.int32),
                    abstract(engine, chain.arg_specs(mode.chain)))
    return Kernel(engine=engine, name="beam_sample" if mode.samples else "beam", mode=mode, bucket=bucket,
                  start=partial(start, engine.vocab_size, mode),
                  step=partial(step, engine, mode), empty=partial(beam_search.empty_records, mode=mode),
                  finished=finished, args=args, rows=mode.beams)

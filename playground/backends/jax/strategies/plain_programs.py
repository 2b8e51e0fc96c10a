"""Greedy and sampling decoding on the device: one token per step, through the logits chain (token_choice.py),
as the kernel's start and step functions (kernel.py). The verify pass and a draft model's loop carry the same
state."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, NamedTuple

import jax
import jax.numpy as jnp

from playground.backends.jax.caches.pytree import JaxCache
from playground.backends.jax.chain import token_choice
from playground.backends.jax.chain.chain import History, Leaf, pushed, start_history
from playground.backends.jax.chain.token_choice import ChainArgs, SamplingMode, StepInfo
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.engine.kernel import Kernel, abstract


@dataclass(frozen=True)
class DecodeState(Generic[Leaf]):
    """Everything a decode call carries over to the next (all device arrays; shape structs when lowering)."""

    cache: JaxCache
    token: Leaf  # (B,) last token, not yet in the cache
    position: Leaf  # () its position
    key: Leaf  # PRNG key
    history: History[Leaf]  # the text so far, as far as the logits chain reads it
    done: Leaf  # () bool: an EOS was produced
    produced: Leaf  # () tokens generated so far


jax.tree_util.register_dataclass(DecodeState, data_fields=["cache", "token", "position", "key", "history", "done",
                                                           "produced"], meta_fields=[])


class Chunk(NamedTuple):
    """A step's record (a chunk's, with a leading (steps,) axis): the token, its StepInfo, and what the strategy
    weighed beside the chain where it records more (DoLa's contrast, contrastive search's candidates)."""

    tokens: jax.Array  # (B,) at the start; (steps,) in a chunk
    info: StepInfo
    own: Any = None  # the strategy's own record of the step; None: nothing beyond the token's StepInfo


def ended(token: jax.Array, eos: tuple[int, ...]) -> jax.Array:
    """() bool: the token (B,) is an end token."""
    return jnp.isin(token, jnp.asarray(eos or (-1,))).any()


def start(vocab_size: int, mode: SamplingMode, eos: tuple[int, ...], logits: jax.Array, ids: jax.Array,
          length: jax.Array, key: jax.Array, args: ChainArgs,
          cache: JaxCache) -> tuple[DecodeState[jax.Array], Chunk]:
    """The first new token from the prefill's logits, the state decoding carries from there, and the token's
    probability, entropy and alternatives."""
    history = start_history(ids, length, mode.needs, vocab_size)
    produced = jnp.int32(0)
    token, key, info, carry = token_choice.select(logits, key, produced, history, mode, args)
    history = pushed(history, token, mode.needs, carry)
    return DecodeState(cache, token, length.astype(jnp.int32), key, history, ended(token, eos), produced + 1), \
        Chunk(token, info)


def step(engine: Engine, mode: SamplingMode, eos: tuple[int, ...], weights: dict, s: DecodeState[jax.Array],
         args: ChainArgs) -> tuple[DecodeState[jax.Array], Chunk]:
    """One token: the model's forward over the last one, the chain, the choice."""
    logits, cache = engine.forward(weights, s.cache, s.token[:, None], s.position[None, None], 1)
    token, key, info, settled = token_choice.select(logits[:, -1], s.key, s.produced, s.history, mode, args)
    state = DecodeState(cache, token, s.position + 1, key, pushed(s.history, token, mode.needs, settled),
                        ended(token, eos), s.produced + 1)
    return state, Chunk(token[0], jax.tree.map(lambda a: a[0], info))


def empty(mode: SamplingMode, steps: int) -> Chunk:
    return Chunk(jnp.full((steps,), -1, jnp.int32),
                 token_choice.empty_info(steps, len(mode.chain.stages), len(mode.needs.carry)))


def finished(state: DecodeState[jax.Array]) -> jax.Array:
    return state.done


def plain_kernel(engine: Engine, bucket: int, mode: SamplingMode, eos: tuple[int, ...]) -> Kernel[DecodeState]:
    """Plain decoding's programs; growth reads only what of the mode sizes the history. They are keyed by the
    registry's name of the strategy whose token choice they make, greedy or sampling: assisted decoding's main
    model and a draft model choose their one token per step with these same programs, so one compile serves all."""
    return Kernel(engine=engine, name="greedy" if mode.greedy else "sampling", mode=(mode, eos), bucket=bucket,
                  start=partial(start, engine.vocab_size, mode, eos), step=partial(step, engine, mode, eos),
                  empty=partial(empty, mode), finished=finished, args=abstract(engine, token_choice.arg_specs(mode)),
                  shapes=mode.needs)

"""The main model's verify pass, jitted: the last token and up to W - 1 drafts in one forward, the kept tokens
chosen inside the same program, and the cache rolled back past what was rejected.

The draft width W is static (one program per width and cache layout, compiled once); how many drafts are
real is traced, so fewer drafts never recompile (padding drafts are computed, then masked out). Rollback is
setting every layer's counter to the new position: the rejected keys stay in their slots, masked, until the
next pass overwrites them (caches/extend.py).
"""

from __future__ import annotations

from functools import partial
from typing import Any, cast

import jax
import jax.numpy as jnp

from playground.backends.jax.caches.plan import Layouts
from playground.backends.jax.caches.pytree import JaxCache, JaxLayer
from playground.backends.jax.chain import token_choice
from playground.backends.jax.chain.chain import pushed
from playground.backends.jax.chain.token_choice import ChainArgs, SamplingMode
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.engine.kernel import Kernel, pinned
from playground.backends.jax.strategies import speculative
from playground.backends.jax.strategies.plain_programs import DecodeState
from playground.backends.jax.strategies.speculative import Verdict


def rolled_back(cache: JaxCache, position: jax.Array) -> JaxCache:
    """The same arrays with every layer's counter at `position`: what lies at or past it is out of the cache."""
    return JaxCache([JaxLayer(layer.layout, layer.arrays, position) for layer in cache.jax_layers])


def verify(engine: Engine, weights: dict, state: DecodeState[jax.Array], drafts: jax.Array, count: jax.Array,
           q: jax.Array | None, args: ChainArgs, *, mode: SamplingMode,
           eos: tuple[int, ...]) -> tuple[DecodeState[jax.Array], Verdict]:
    """drafts (B, W - 1) of which `count` are real; q (B, W - 1, V) the draft model's distributions (None: the
    drafts came from prompt lookup). Returns the state after the kept tokens and the verdict."""
    width = drafts.shape[1] + 1
    ids = jnp.concatenate([state.token[:, None], drafts], axis=1)  # (B, W)
    positions = (state.position + jnp.arange(width, dtype=jnp.int32))[None, :]  # (1, W)
    logits, cache = engine.forward(weights, state.cache, ids, positions, 0)  # (B, W, V)
    key, chain_key = token_choice.split_for_chain(state.key, mode)
    rows = speculative.rows(logits, drafts, state.history, state.produced, chain_key, mode, args)
    if mode.greedy:
        tokens, kept = speculative.greedy(rows.applied.cands, drafts, count)
    else:
        tokens, kept, key = speculative.sample(rows.final, drafts, count, q, key)
    out = speculative.verdict(tokens, kept, rows, eos)
    position = state.position + out.kept_count
    last = out.tokens[out.kept_count - 1][None]
    history = pushed(state.history, out.tokens[None, :], mode.needs)
    new = DecodeState(rolled_back(cache, position), last, position, key, history,
                      jnp.isin(last, jnp.asarray(eos or (-1,))).any(), state.produced + out.kept_count)
    return pinned(engine, new), out


def verify_program(kernel: Kernel[DecodeState], layouts: Layouts, width: int, with_q: bool) -> Pending:
    """The compiled verify pass over plain decoding's state (its kernel's) for these layouts and draft width."""
    engine, (mode, eos) = kernel.engine, cast(tuple[SamplingMode, tuple[int, ...]], kernel.mode)

    def inputs() -> tuple[Any, ...]:
        q = engine.shape_struct((1, width - 1, engine.vocab_size), jnp.float32) if with_q else None
        return (engine.weights, kernel.abstract_state(layouts), engine.shape_struct((1, width - 1), jnp.int32),
                engine.shape_struct((), jnp.int32), q, kernel.args)

    return kernel.program(("verify", layouts, width, mode, eos, with_q), partial(verify, engine, mode=mode, eos=eos),
                          inputs, ("state",))

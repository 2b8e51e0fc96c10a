"""Next-token selection inside jit: greedy or sampling, after the run's logits chain (chain.py).

What changes shapes or branches (greedy or not, which stages run, top-k's k) is a static `SamplingMode` and
part of the compile key; the values (temperature, thresholds, penalties) are traced `ChainArgs`, so changing them
never recompiles. Random keys are threaded through every step, so a seed reproduces its tokens exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from playground.backends.base import TOP_ALTERNATIVES
from playground.backends.jax.chain import chain
from playground.backends.jax.chain.chain import Chain, Context, History, Needs
from playground.spec import RunSpec


@dataclass(frozen=True)
class SamplingMode:
    """The static half of a strategy's token choice: greedy or not, and the logits chain (its stages' static
    keys and what they read). It decides the traced program, so it keys compiled functions."""

    greedy: bool = True
    chain: Chain = Chain()

    @property
    def needs(self) -> Needs:
        return self.chain.needs


# The traced half: each stage's arguments, in chain order.
ChainArgs = tuple


def mode_for(spec: RunSpec, context: Context, *, samples: bool, history: int = 0,
             keep_history: bool = True) -> tuple[SamplingMode, ChainArgs]:
    """The static mode of `spec` and its traced args (on the host); the strategy's plug-in says whether it
    samples at all, and how many tokens a history must hold should a stage read it."""
    built, args = chain.build(spec, context, sampling=samples, history=history, keep_history=keep_history)
    return SamplingMode(greedy=not samples, chain=built), args


def arg_specs(mode: SamplingMode) -> ChainArgs:
    return chain.arg_specs(mode.chain)


class StepInfo(NamedTuple):
    """What the token view shows for one step, meaning what the PyTorch probe's records mean: `p` under the
    distribution the token was drawn from (after every processor and filter), `p_model` under the model's own
    softmax at temperature 1; the alternatives are the model's most likely tokens."""

    p: jax.Array  # (B,) probability of the chosen token
    entropy: jax.Array  # (B,) nats
    p_model: jax.Array  # (B,)
    entropy_model: jax.Array  # (B,) nats
    top_ids: jax.Array  # (B, TOP_ALTERNATIVES), by p_model
    top_p: jax.Array  # (B, TOP_ALTERNATIVES)
    top_p_model: jax.Array  # (B, TOP_ALTERNATIVES)
    top_cut: jax.Array  # (B, TOP_ALTERNATIVES) int32: 1 + the chain position of what removed each alternative
    removed: jax.Array  # (B, S) int32: tokens each stage of the chain removed
    moved: jax.Array  # (B, S) float32: probability mass each stage moved
    state: jax.Array  # (B, C) float32: the state each carrying stage read at this step (mirostat's μ, ...)


def empty_info(steps: int, stages: int, carried: int = 0) -> StepInfo:
    """Rows for `steps` steps of a chain of `stages` stages (`carried` floats of state), filled as a decode call
    runs them."""
    top = (steps, TOP_ALTERNATIVES)
    return StepInfo(jnp.zeros((steps,)), jnp.zeros((steps,)), jnp.zeros((steps,)), jnp.zeros((steps,)),
                    jnp.zeros(top, jnp.int32), jnp.zeros(top), jnp.zeros(top), jnp.zeros(top, jnp.int32),
                    jnp.zeros((steps, stages), jnp.int32), jnp.zeros((steps, stages)), jnp.zeros((steps, carried)))


def _chosen(probs: jax.Array, token: jax.Array) -> jax.Array:
    return jnp.take_along_axis(probs, token[:, None], axis=-1)[:, 0]


def token_info(model: jax.Array, final: jax.Array, token: jax.Array, top: jax.Array,
               applied: chain.Applied) -> StepInfo:
    """model and final probabilities (B, V) over the whole vocabulary, token (B,), the model's top alternatives
    (B, TOP_ALTERNATIVES) whose fate the chain's record followed, and that record."""
    entropy = jax.scipy.special.entr
    top_model = jnp.take_along_axis(model, top, axis=-1)
    top_final = jnp.take_along_axis(final, top, axis=-1)
    return StepInfo(_chosen(final, token), entropy(final).sum(axis=-1), _chosen(model, token),
                    entropy(model).sum(axis=-1), top, top_final, top_model, applied.cut, applied.removed,
                    applied.moved, applied.carried)


class Processed(NamedTuple):
    """One row batch through the chain: what a token is picked from, and what the view records of it."""

    model: jax.Array  # (B, V) the model's own softmax
    top: jax.Array  # (B, TOP_ALTERNATIVES) int32 the model's most likely tokens
    applied: chain.Applied  # the candidates after the chain, and its record
    final: jax.Array  # (B, V) the distribution a token is taken from (0 where removed)


def processed(logits: jax.Array, history: History[jax.Array], produced: jax.Array, key: jax.Array | None,
              mode: SamplingMode, args: ChainArgs, model_logits: jax.Array | None = None) -> Processed:
    """logits (B, V) through the chain; `key` is the chain's own (None when no stage draws). `model_logits`: the
    model's own logits where a strategy's stage made `logits` of them (DoLa's contrast), recorded as the first
    stage; the model's probabilities and top alternatives are then the own logits'."""
    logits = logits.astype(jnp.float32)
    own = logits if model_logits is None else model_logits.astype(jnp.float32)
    model = jax.nn.softmax(own, axis=-1)
    top = jax.lax.top_k(model, TOP_ALTERNATIVES)[1].astype(jnp.int32)
    applied = chain.apply(logits, history, produced, key, mode.chain, args, watch=top)
    if model_logits is not None:
        applied = chain.preceded(applied, own, logits, top)
    final = chain.in_vocab(applied.cands._replace(values=jax.nn.softmax(applied.cands.values, axis=-1)),
                           logits.shape[-1], 0.0)
    return Processed(model, top, applied, final)


def split_for_chain(key: jax.Array, mode: SamplingMode) -> tuple[jax.Array, jax.Array | None]:
    """(the key to carry on, the chain's key): a chain with a random stage takes a key of its own each step, a
    chain without one leaves the random stream as it was."""
    if not mode.chain.random:
        return key, None
    key, chain_key = jax.random.split(key)
    return key, chain_key


@partial(jax.jit, static_argnames=("chain_random", "greedy"))
def _advanced(key: jax.Array, steps: jax.Array, chain_random: bool, greedy: bool) -> jax.Array:
    def one(_: jax.Array, key: jax.Array) -> jax.Array:  # select()'s splits, keeping what it carries on
        key = jax.random.split(key)[0] if chain_random else key
        return key if greedy else jax.random.split(key)[0]

    return jax.lax.fori_loop(0, steps, one, key)


def replayed_key(seed: int, steps: int, mode: SamplingMode) -> jax.Array:
    """The key select() holds after `steps` tokens of a run seeded with `seed`: a run whose first tokens are forced
    (a Step from a node of a branch tree) draws its next token as the uninterrupted run draws it there. One program
    per (random chain, greedy) pair; the count is traced, so no depth compiles again."""
    return _advanced(jax.random.PRNGKey(seed), jnp.int32(steps), mode.chain.random, mode.greedy)


def pick(cands: chain.Candidates, greedy: bool, key: jax.Array) -> jax.Array:
    """The token (B,) int32: the best candidate, or one drawn from the candidates' softmax."""
    if greedy:
        return chain.chosen_ids(cands, jnp.argmax(cands.values, axis=-1))
    return chain.chosen_ids(cands, jax.random.categorical(key, cands.values, axis=-1))


def select(logits: jax.Array, key: jax.Array, produced: jax.Array, history: History[jax.Array],
           mode: SamplingMode, args: ChainArgs, model_logits: jax.Array | None = None
           ) -> tuple[jax.Array, jax.Array, StepInfo, jax.Array]:
    """The next token (B,) int32 for logits (B, V), the key for the next step, the token's StepInfo, and the
    carrying stages' state after it (B, C), for the history (`chain.pushed`).

    `produced` is how many tokens this request has generated so far (for min_new_tokens); `model_logits` as in
    `processed`.
    """
    key, chain_key = split_for_chain(key, mode)
    out = processed(logits, history, produced, chain_key, mode, args, model_logits)
    if mode.greedy:
        token = pick(out.applied.cands, True, key)
    else:
        key, draw = jax.random.split(key)
        token = pick(out.applied.cands, False, draw)
    carry = chain.settle(mode.chain, args, out.applied, token)
    return token, key, token_info(out.model, out.final, token, out.top, out.applied), carry

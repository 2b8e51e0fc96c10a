"""Next-token selection inside jit: greedy or sampling, with the same processors and order as transformers.

What changes shapes or branches (greedy or not, top_k, which filters are on) is a static `SamplingMode`
and part of the compile key; the values (temperature, top_p, min_p, penalty, min_new_tokens) are traced
`Knobs`, so changing them never recompiles. Random keys are threaded through every step, so a seed
reproduces its tokens exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

import jax
import jax.numpy as jnp

from playground.backends.base import CUT_STAGES, TOP_ALTERNATIVES
from playground.spec import RunSpec


@dataclass(frozen=True)
class SamplingMode:
    """The static half of a strategy: it decides the traced program, so it keys compiled functions."""

    greedy: bool = True
    top_k: int = 0  # 0: off; a shape (lax.top_k), hence static
    top_p: bool = False
    min_p: bool = False
    penalty: bool = False  # repetition penalty: tracks which tokens were seen


# A program's inputs: arrays when it runs, shape structs in their place when it is lowered ahead of its first call.
Leaf = TypeVar("Leaf", jax.Array, jax.ShapeDtypeStruct)


class Knobs(NamedTuple, Generic[Leaf]):
    """The traced half: scalars passed as arguments."""

    temperature: Leaf
    top_p: Leaf
    min_p: Leaf
    penalty: Leaf
    min_new_tokens: Leaf


def mode_for(spec: RunSpec, vocab_size: int, *, samples: bool) -> SamplingMode:
    """The static mode of `spec`'s knobs; the strategy's plug-in says whether it samples at all."""
    penalty = spec.repetition_penalty != 1.0
    if not samples:
        return SamplingMode(greedy=True, penalty=penalty)
    top_k = spec.top_k if 0 < spec.top_k < vocab_size else 0
    return SamplingMode(greedy=False, top_k=top_k, top_p=spec.top_p < 1.0, min_p=spec.min_p > 0.0,
                        penalty=penalty)


def knobs_for(spec: RunSpec) -> Knobs[jax.Array]:
    return Knobs(temperature=jnp.float32(spec.temperature), top_p=jnp.float32(spec.top_p),
                 min_p=jnp.float32(spec.min_p), penalty=jnp.float32(spec.repetition_penalty),
                 min_new_tokens=jnp.int32(spec.min_new_tokens))


def seen_tokens(ids: jax.Array, length: jax.Array, vocab_size: int) -> jax.Array:
    """(B, V) bool: which tokens occur in the first `length` prompt ids (the rest is bucket padding)."""
    valid = jnp.arange(ids.shape[1])[None, :] < length  # (B, P)
    rows = jnp.broadcast_to(jnp.arange(ids.shape[0])[:, None], ids.shape)
    seen = jnp.zeros((ids.shape[0], vocab_size), bool)
    return seen.at[rows, jnp.where(valid, ids, vocab_size)].set(True, mode="drop")


def penalize(logits: jax.Array, seen: jax.Array, penalty: jax.Array) -> jax.Array:
    """RepetitionPenaltyLogitsProcessor: seen tokens' logits divided (positive) or multiplied (negative)."""
    return jnp.where(seen, jnp.where(logits < 0, logits * penalty, logits / penalty), logits)


_TOP_K, _TOP_P, _MIN_P = (CUT_STAGES.index(name) for name in ("top_k", "top_p", "min_p"))


def _filter_sorted(values: jax.Array, mode: SamplingMode, knobs: Knobs[jax.Array]) -> tuple[jax.Array, jax.Array]:
    """top_p then min_p on logits sorted in descending order; removed entries become -inf. Also returns which
    filter removed each entry (a CUT_STAGES index; 0 where it survived).

    TopPLogitsWarper removes a token when the probability mass ranked above it already reaches top_p
    (the best token always stays); MinPLogitsWarper removes tokens below min_p x the best probability.
    """
    cut = jnp.zeros(values.shape, jnp.int32)
    if mode.top_p:
        probs = jax.nn.softmax(values, axis=-1)
        mass_above = jnp.cumsum(probs, axis=-1) - probs
        keep = (mass_above < knobs.top_p).at[..., 0].set(True)
        cut = jnp.where(keep | (cut > 0), cut, _TOP_P)
        values = jnp.where(keep, values, -jnp.inf)
    if mode.min_p:
        probs = jax.nn.softmax(values, axis=-1)
        keep = (probs >= knobs.min_p * probs[..., :1]).at[..., 0].set(True)
        cut = jnp.where(keep | (cut > 0), cut, _MIN_P)
        values = jnp.where(keep, values, -jnp.inf)
    return values, cut


def candidates(logits: jax.Array, mode: SamplingMode,
               knobs: Knobs[jax.Array]) -> tuple[jax.Array, jax.Array | None, jax.Array]:
    """Temperature, top_k, top_p, min_p (transformers' order): (B, k) filtered logits and their token ids,
    in descending order; ids None when no filter is on (then the logits are the whole vocabulary). Last, (B, V):
    which filter removed each token of the vocabulary (a CUT_STAGES index, 0 where it survived)."""
    logits = logits / knobs.temperature
    if not (mode.top_k or mode.top_p or mode.min_p):
        return logits, None, jnp.zeros(logits.shape, jnp.int32)
    values, indices = jax.lax.top_k(logits, mode.top_k or logits.shape[-1])  # (B, k)
    values, sorted_cut = _filter_sorted(values, mode, knobs)
    rows = jnp.arange(logits.shape[0])[:, None]
    cut = jnp.full(logits.shape, _TOP_K if mode.top_k else 0, jnp.int32).at[rows, indices].set(sorted_cut)
    return values, indices, cut


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
    top_cut: jax.Array  # (B, TOP_ALTERNATIVES) int32: the CUT_STAGES index of what removed each alternative


def empty_info(steps: int) -> StepInfo:
    """Rows for `steps` steps, filled as a decode call runs them."""
    top = (steps, TOP_ALTERNATIVES)
    return StepInfo(jnp.zeros((steps,)), jnp.zeros((steps,)), jnp.zeros((steps,)), jnp.zeros((steps,)),
                    jnp.zeros(top, jnp.int32), jnp.zeros(top), jnp.zeros(top), jnp.zeros(top, jnp.int32))


def _chosen(probs: jax.Array, token: jax.Array) -> jax.Array:
    return jnp.take_along_axis(probs, token[:, None], axis=-1)[:, 0]


def token_info(model: jax.Array, final: jax.Array, token: jax.Array, cut: jax.Array) -> StepInfo:
    """model and final probabilities (B, V) over the whole vocabulary, token (B,), cut (B, V) stage indices."""
    entropy = jax.scipy.special.entr
    top_model, top_ids = jax.lax.top_k(model, TOP_ALTERNATIVES)
    top_final = jnp.take_along_axis(final, top_ids, axis=-1)
    top_cut = jnp.take_along_axis(cut, top_ids, axis=-1)
    return StepInfo(_chosen(final, token), entropy(final).sum(axis=-1), _chosen(model, token),
                    entropy(model).sum(axis=-1), top_ids.astype(jnp.int32), top_final, top_model, top_cut)


def select(logits: jax.Array, key: jax.Array, produced: jax.Array, seen: jax.Array, mode: SamplingMode,
           knobs: Knobs[jax.Array], eos_ids: tuple[int, ...]) -> tuple[jax.Array, jax.Array, StepInfo]:
    """The next token (B,) int32 for logits (B, V), the key for the next step, and the token's StepInfo.

    `produced` is how many tokens this request has generated so far (for min_new_tokens).
    """
    logits = logits.astype(jnp.float32)
    model = jax.nn.softmax(logits, axis=-1)  # before any processor: the model's own distribution
    if mode.penalty:
        logits = penalize(logits, seen, knobs.penalty)
    if eos_ids:  # MinNewTokensLengthLogitsProcessor: no EOS before min_new_tokens
        eos = jnp.zeros(logits.shape[-1], bool).at[jnp.asarray(eos_ids)].set(True, mode="drop")
        logits = jnp.where(eos & (produced < knobs.min_new_tokens), -jnp.inf, logits)
    blocked = jnp.where(jnp.isneginf(logits), 1, 0).astype(jnp.int32)  # (B, V) 1: removed before any filter
    if mode.greedy:
        token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return token, key, token_info(model, jax.nn.softmax(logits, axis=-1), token, blocked)
    key, draw = jax.random.split(key)
    values, indices, cut = candidates(logits, mode, knobs)
    cut = jnp.where(blocked > 0, blocked, cut)
    choice = jax.random.categorical(draw, values, axis=-1)  # (B,)
    probs = jax.nn.softmax(values, axis=-1)  # filtered-out candidates are -inf: probability 0
    if indices is not None:
        choice = jnp.take_along_axis(indices, choice[:, None], axis=-1)[:, 0]
        rows = jnp.arange(probs.shape[0])[:, None]
        probs = jnp.zeros(logits.shape, probs.dtype).at[rows, indices].set(probs)  # back to (B, V)
    token = choice.astype(jnp.int32)
    return token, key, token_info(model, probs, token, cut)


def mark_seen(seen: jax.Array, token: jax.Array, mode: SamplingMode) -> jax.Array:
    if not mode.penalty:
        return seen
    return seen.at[jnp.arange(token.shape[0]), token].set(True)

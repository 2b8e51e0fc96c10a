"""Which drafted tokens the main model keeps, inside jit: greedy matching, or speculative sampling.

The main model's logits for the last token and every draft arrive at once (W rows). Each row is processed as
sampling.select would process it had the drafts before it been accepted (repetition penalty sees them,
min_new_tokens counts them), so the kept tokens are those plain decoding would give. Greedy keeps the drafts
that equal the main model's argmax, then adds the main model's own token. Sampling is the standard rule
(Leviathan et al., 2023; Chen et al., 2023): draft d with draft probability q(d) is kept with probability
min(1, p(d) / q(d)); at the first rejection the token is drawn from norm(max(0, p - q)); with every draft kept,
from p. For prompt lookup q is one-hot. Either way the tokens follow the main model's distribution.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from playground.backends.jax import sampling
from playground.backends.jax.sampling import Knobs, SamplingMode, StepInfo


class Verdict(NamedTuple):
    """One verify pass's outcome: `kept_count` new tokens (accepted drafts, then the main model's own)."""

    tokens: jax.Array  # (W,) int32, -1 past `kept_count`
    kept_count: jax.Array  # () int32 new tokens, 1..W
    accepted: jax.Array  # () int32 drafts among them (kept_count - 1, or all of them when an EOS draft ended it)
    info: StepInfo  # (W, ...) rows, as the decode chunk's


def processed(logits: jax.Array, seen: jax.Array, produced: jax.Array, mode: SamplingMode, knobs: Knobs[jax.Array],
               eos_ids: tuple[int, ...]) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """logits (B, V) -> (the model's softmax, the processed logits, the distribution a token is drawn from,
    which stage removed each token: a CUT_STAGES index, 0 where it survived), as sampling.select records them."""
    logits = logits.astype(jnp.float32)
    model = jax.nn.softmax(logits, axis=-1)
    if mode.penalty:
        logits = sampling.penalize(logits, seen, knobs.penalty)
    if eos_ids:
        eos = jnp.zeros(logits.shape[-1], bool).at[jnp.asarray(eos_ids)].set(True, mode="drop")
        logits = jnp.where(eos & (produced < knobs.min_new_tokens), -jnp.inf, logits)
    blocked = jnp.where(jnp.isneginf(logits), 1, 0).astype(jnp.int32)  # removed before any filter
    if mode.greedy:
        return model, logits, jax.nn.softmax(logits, axis=-1), blocked
    values, indices, cut = sampling.candidates(logits, mode, knobs)
    probs = jax.nn.softmax(values, axis=-1)
    if indices is not None:
        rows = jnp.arange(probs.shape[0])[:, None]
        probs = jnp.zeros(logits.shape, probs.dtype).at[rows, indices].set(probs)
    return model, logits, probs, jnp.where(blocked > 0, blocked, cut)


def rows(logits: jax.Array, drafts: jax.Array, seen: jax.Array, produced: jax.Array, mode: SamplingMode,
         knobs: Knobs[jax.Array], eos_ids: tuple[int, ...]) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """logits (B, W, V), drafts (B, W - 1) -> per row (W, B, V): model softmax, processed logits, final p, cut."""
    padded = jnp.concatenate([drafts, drafts[:, :1]], axis=1)  # (B, W): row i's draft, marked seen after row i

    def body(seen: jax.Array, row: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, tuple]:
        row_logits, draft, index = row
        out = processed(row_logits, seen, produced + index, mode, knobs, eos_ids)
        return sampling.mark_seen(seen, draft, mode), out

    width = logits.shape[1]
    xs = (logits.transpose(1, 0, 2), padded.T, jnp.arange(width, dtype=jnp.int32))
    _, out = jax.lax.scan(body, seen, xs)
    return out


def _kept(matches: jax.Array, count: jax.Array) -> jax.Array:
    """How many leading drafts are kept: (W - 1,) bool per draft, `count` of them real."""
    real = jnp.arange(matches.shape[0]) < count
    return jnp.cumprod(matches & real).sum().astype(jnp.int32)


def greedy(processed: jax.Array, drafts: jax.Array, count: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(W,) tokens (the main model's argmax per row) and how many drafts equal them, in a row."""
    targets = jnp.argmax(processed[:, 0], axis=-1).astype(jnp.int32)  # (W,)
    return targets, _kept(drafts[0] == targets[:-1], count)


def sample(final: jax.Array, drafts: jax.Array, count: jax.Array, q: jax.Array | None,
           key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Speculative sampling over p = final (W, B, V) and q (B, W - 1, V) (None: one-hot at the drafts).
    Returns (W,) tokens (drafts, then the drawn one at the first rejection or at the end), kept, new key."""
    p = final[:, 0]  # (W, V)
    width, vocab = p.shape
    q_rows = jax.nn.one_hot(drafts[0], vocab, dtype=p.dtype) if q is None else q[0]  # (W - 1, V)
    p_draft = jnp.take_along_axis(p[:-1], drafts[0][:, None], axis=-1)[:, 0]
    q_draft = jnp.take_along_axis(q_rows, drafts[0][:, None], axis=-1)[:, 0]
    key, uniform_key, draw_key = jax.random.split(key, 3)
    uniform = jax.random.uniform(uniform_key, (width - 1,))
    kept = _kept(uniform * q_draft < p_draft, count)  # u < p / q, without dividing by a zero q
    residual = jnp.maximum(p[kept] - jnp.where(kept < count, jnp.pad(q_rows, ((0, 1), (0, 0)))[kept], 0.0), 0.0)
    total = residual.sum()
    residual = jnp.where(total > 0, residual / jnp.where(total > 0, total, 1.0), p[kept])
    drawn = jax.random.categorical(draw_key, jnp.log(residual)).astype(jnp.int32)
    tokens = jnp.concatenate([drafts[0], jnp.zeros((1,), jnp.int32)])
    return jnp.where(jnp.arange(width) == kept, drawn, tokens), kept, key


def verdict(tokens: jax.Array, kept: jax.Array, model: jax.Array, final: jax.Array, cut: jax.Array,
            eos_ids: tuple[int, ...]) -> Verdict:
    """The kept tokens cut after a first EOS, and their StepInfo rows (under each row's own distributions)."""
    width = tokens.shape[0]
    index = jnp.arange(width)
    stop = jnp.isin(tokens, jnp.asarray(eos_ids or (-1,))) & (index <= kept)
    count = jnp.where(stop.any(), jnp.argmax(stop) + 1, kept + 1).astype(jnp.int32)
    info = jax.vmap(sampling.token_info)(model, final, tokens[:, None], cut)  # rows (W, 1, ...)
    info = StepInfo(*(field[:, 0] for field in info))
    return Verdict(jnp.where(index < count, tokens, -1), count, jnp.minimum(kept, count), info)

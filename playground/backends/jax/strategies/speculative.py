"""Which drafted tokens the main model keeps, inside jit: greedy matching, or speculative sampling.

The main model's logits for the last token and every draft arrive at once (W rows). Each row goes through the
logits chain as token_choice.select would take it had the drafts before it been accepted (the penalties see them,
min_new_tokens counts them), so the kept tokens are those plain decoding would give. Greedy keeps the drafts
that equal the main model's argmax, then adds the main model's own token. Sampling is the standard rule
(Leviathan et al., 2023; Chen et al., 2023): draft d with draft probability q(d) is kept with probability
min(1, p(d) / q(d)); at the first rejection the token is drawn from norm(max(0, p - q)); with every draft kept,
from p. For prompt lookup q is one-hot. Either way the tokens follow the main model's distribution.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from playground.backends.jax.chain import token_choice
from playground.backends.jax.chain.chain import Candidates, History, for_row, pushed
from playground.backends.jax.chain.token_choice import ChainArgs, SamplingMode, StepInfo


class Verdict(NamedTuple):
    """One verify pass's outcome: `kept_count` new tokens (accepted drafts, then the main model's own)."""

    tokens: jax.Array  # (W,) int32, -1 past `kept_count`
    kept_count: jax.Array  # () int32 new tokens, 1..W
    accepted: jax.Array  # () int32 drafts among them (kept_count - 1, or all of them when an EOS draft ended it)
    info: StepInfo  # (W, ...) rows, as the decode chunk's


def rows(logits: jax.Array, drafts: jax.Array, history: History[jax.Array], produced: jax.Array,
         key: jax.Array | None, mode: SamplingMode, args: ChainArgs) -> token_choice.Processed:
    """logits (B, W, V), drafts (B, W - 1) -> each row through the chain, stacked (W, B, ...): row i sees the
    drafts before it in its history, counts them as produced and reads its own row of a per-row stage's arguments
    (the constraint's mask after those drafts). `key` is the chain's own (None: no stage draws)."""
    padded = jnp.concatenate([drafts, drafts[:, :1]], axis=1)  # (B, W): row i's draft, pushed after row i
    width = logits.shape[1]
    keys = jax.random.split(key, width) if key is not None else jnp.zeros((width, 2), jnp.uint32)

    def body(history: History[jax.Array], row: tuple[jax.Array, ...]) -> tuple[History[jax.Array], Any]:
        row_logits, draft, index, row_key = row
        out = token_choice.processed(row_logits, history, produced + index, row_key if key is not None else None,
                                 mode, for_row(mode.chain, args, index))
        return pushed(history, draft, mode.needs), out

    xs = (logits.transpose(1, 0, 2), padded.T, jnp.arange(width, dtype=jnp.int32), keys)
    _, out = jax.lax.scan(body, history, xs)
    return out


def _kept(matches: jax.Array, count: jax.Array) -> jax.Array:
    """How many leading drafts are kept: (W - 1,) bool per draft, `count` of them real."""
    real = jnp.arange(matches.shape[0]) < count
    return jnp.cumprod(matches & real).sum().astype(jnp.int32)


def greedy(cands: Candidates, drafts: jax.Array, count: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(W,) tokens (the main model's best candidate per row, cands stacked (W, B, N)) and how many drafts equal
    them, in a row."""
    best = jnp.argmax(cands.values[:, 0], axis=-1)  # (W,)
    targets = best if cands.ids is None else jnp.take_along_axis(cands.ids[:, 0], best[:, None], axis=-1)[:, 0]
    targets = targets.astype(jnp.int32)
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


def verdict(tokens: jax.Array, kept: jax.Array, rows_out: token_choice.Processed, eos_ids: tuple[int, ...]) -> Verdict:
    """The kept tokens cut after a first EOS, and their StepInfo rows (under each row's own distributions)."""
    width = tokens.shape[0]
    index = jnp.arange(width)
    stop = jnp.isin(tokens, jnp.asarray(eos_ids or (-1,))) & (index <= kept)
    count = jnp.where(stop.any(), jnp.argmax(stop) + 1, kept + 1).astype(jnp.int32)
    info = jax.vmap(token_choice.token_info)(rows_out.model, rows_out.final, tokens[:, None], rows_out.top,
                                         rows_out.applied)  # rows (W, 1, ...)
    info = StepInfo(*(field[:, 0] for field in info))
    return Verdict(jnp.where(index < count, tokens, -1), count, jnp.minimum(kept, count), info)

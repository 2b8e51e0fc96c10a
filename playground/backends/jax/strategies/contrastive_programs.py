"""The compiled programs of contrastive search on JAX (transformers 4.52.4's `_contrastive_search` and
`_ranking_fast`, as the PyTorch port backends/torch/contrastive.py runs them), built on a model's Engine.

The prompt's prefill keeps the final norm's hidden state at every position (Engine.forward_layers). A step takes
the logits chain's output on the last logits, its softmax and top_k candidates, runs ONE forward over a k-row
batch (the batch-1 cache repeated k times, each row the context plus one candidate), and scores each candidate by
(1 - alpha) * p - alpha * (its greatest cosine similarity to the context's hidden states). The winner's cache row
is gathered back (beam_programs.reorder, valid for every layout) and its logits and hidden state carried on, so
the cache is batch 1 between steps and its last token is already in it (4.52's look-ahead). The context's hidden
states live in a fixed (capacity, H) buffer, unit length, rows past `position` (and the prompt's bucket padding)
masked out, so the step's shapes never change with the text's length.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from playground.backends.jax.caches.plan import Layouts
from playground.backends.jax.caches.pytree import JaxCache
from playground.backends.jax.chain import token_choice
from playground.backends.jax.chain.chain import History, pushed, start_history
from playground.backends.jax.chain.token_choice import ChainArgs, SamplingMode
from playground.backends.jax.engine import prefill
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.engine.kernel import Kernel, abstract
from playground.backends.jax.strategies.beam_programs import reorder
from playground.backends.jax.strategies.plain_programs import Chunk


@dataclasses.dataclass(frozen=True)
class ContrastiveMode:
    """The static half of a contrastive search: it shapes the traced programs, so it keys them."""

    tokens: SamplingMode  # the logits chain before the softmax (greedy: contrastive search never samples)
    k: int  # candidates per step: the batch of the step's forward
    capacity: int  # context rows: the prompt's bucket and every new token
    eos: tuple[int, ...]
    layer: int  # transformers' hidden_states index of the final norm's output (num_hidden_layers)


class ContrastiveArgs(NamedTuple):
    """The traced half: the chain's arguments and the score's weights, each a float32 made on the host from the
    double alpha, as torch multiplies a float32 tensor by a Python float (a new alpha compiles nothing)."""

    chain: ChainArgs
    keep: Any  # () float32(1 - alpha): the probability's weight
    alpha: Any  # () float32(alpha): the degeneration penalty's weight


class Weighed(NamedTuple):
    """What decided one token: the k candidates, most probable first, and how each was scored."""

    ids: jax.Array  # (k,) int32
    probs: jax.Array  # (k,) after the logits chain's processors
    penalties: jax.Array  # (k,) greatest cosine similarity to the context
    scores: jax.Array  # (k,) (1 - alpha) * prob - alpha * penalty
    chosen: jax.Array  # () int32 index of the highest score


@dataclasses.dataclass(frozen=True)
class ContrastiveState:
    """What a call carries to the next (device arrays; shape structs when lowering)."""

    cache: JaxCache  # batch 1: the prompt and every chosen token (the step that weighed it cached it)
    logits: Any  # (1, V) the next-token logits after the last chosen token
    context: Any  # (capacity, H) float32 unit hidden states of the text so far; rows >= position unused
    position: Any  # () int32 the next token's position: also the context's valid rows
    key: Any  # PRNG key (for a chain stage that draws; contrastive search itself never does)
    history: History[Any]
    done: Any  # () bool: an EOS was chosen
    produced: Any  # () int32 tokens chosen so far


jax.tree_util.register_dataclass(ContrastiveState, data_fields=["cache", "logits", "context", "position", "key",
                                                                "history", "done", "produced"], meta_fields=[])


def _unit(states: jax.Array) -> jax.Array:
    """Rows (N, H) divided by their norms, as `_ranking_fast` normalizes the context and the candidates."""
    return states / jnp.linalg.norm(states, axis=-1, keepdims=True)


def _prefill(engine: Engine, weights: dict, ids: jax.Array, length: jax.Array, *, layouts: Layouts,
             layer: int) -> tuple[tuple[jax.Array, jax.Array], JaxCache]:
    """The prompt padded on the right into a new cache: the logits at its last real position (1, V) and the
    final hidden state at every position (1, bucket, H), the first context."""
    def step(cache: JaxCache, chunk: jax.Array, positions: jax.Array, keep: jax.Array) -> tuple:
        logits, (hidden,), _, cache = engine.forward_layers(weights, cache, chunk, positions, keep, hidden=(layer,))
        return logits[:, -1].astype(jnp.float32), hidden.astype(jnp.float32), cache

    logits, hidden, cache = prefill.prefill(step, ids, length, layouts, engine.constrain)  # in chunks: prefill.py
    out = (logits, hidden)
    if engine.mesh is not None:
        out = jax.lax.with_sharding_constraint(out, engine.replicated())
    return out, cache


def start(vocab_size: int, mode: ContrastiveMode, prefilled: tuple[jax.Array, jax.Array], ids: jax.Array,
          length: jax.Array, key: jax.Array, args: ContrastiveArgs, cache: JaxCache) -> tuple[ContrastiveState, None]:
    """The state before the first step: the prompt's unit hidden states as the context (its padding zeroed and
    masked), its last logits to pick the first candidates from. No token yet (no record): the first call chooses
    it."""
    logits, hidden = prefilled
    bucket = hidden.shape[1]
    valid = (jnp.arange(bucket) < length)[:, None]
    context = jnp.zeros((mode.capacity, hidden.shape[-1]), jnp.float32)
    context = context.at[:bucket].set(jnp.where(valid, _unit(hidden[0]), 0.0))
    history = start_history(ids, length, mode.tokens.needs, vocab_size)
    state = ContrastiveState(cache, logits, context, length.astype(jnp.int32), key, history, jnp.bool_(False),
                             jnp.int32(0))
    return state, None


def _weigh(context: jax.Array, valid: jax.Array, candidates: jax.Array, probs: jax.Array,
           args: ContrastiveArgs) -> tuple[jax.Array, jax.Array]:
    """`_ranking_fast`: each candidate's (k, H unit) greatest cosine similarity to the valid context rows, and
    its score. Full float32 products (no reduced-precision passes on an accelerator): a near tie decides."""
    cosine = jnp.einsum("kh,ch->kc", candidates, context, precision=jax.lax.Precision.HIGHEST)
    cosine = jnp.where(valid[None, :], cosine, jnp.finfo(cosine.dtype).min)  # padding never counts as similar
    penalty = cosine.max(axis=-1)
    return penalty, args.keep * probs - args.alpha * penalty


def step(engine: Engine, mode: ContrastiveMode, weights: dict, s: ContrastiveState,
         args: ContrastiveArgs) -> tuple[ContrastiveState, Chunk]:
    """One token: the processors, softmax and top_k; the k candidates' forward; the best score's row kept."""
    key, chain_key = token_choice.split_for_chain(s.key, mode.tokens)
    out = token_choice.processed(s.logits, s.history, s.produced, chain_key, mode.tokens, args.chain)
    probs, ids = jax.lax.top_k(out.final[0], mode.k)  # softmax of the processed logits, as 4.52
    ids = ids.astype(jnp.int32)
    rows = reorder(s.cache, jnp.zeros((mode.k,), jnp.int32))  # the context's cache, once per candidate
    positions = jnp.broadcast_to(s.position, (mode.k, 1))
    logits, (hidden,), _, rows = engine.forward_layers(weights, rows, ids[:, None], positions, 1,
                                                       hidden=(mode.layer,))
    candidates = _unit(hidden[:, -1].astype(jnp.float32))  # (k, H)
    valid = jnp.arange(mode.capacity) < s.position
    penalties, scores = _weigh(s.context, valid, candidates, probs, args)
    chosen = jnp.argmax(scores).astype(jnp.int32)
    token = ids[chosen][None]  # (1,)
    info = token_choice.token_info(out.model, out.final, token, out.top, out.applied)
    context = jax.lax.dynamic_update_slice(s.context, candidates[chosen][None], (s.position, jnp.int32(0)))
    state = ContrastiveState(reorder(rows, chosen[None]), logits[chosen, -1][None].astype(jnp.float32), context,
                             s.position + 1, key, pushed(s.history, token, mode.tokens.needs),
                             jnp.isin(token, jnp.asarray(mode.eos or (-1,))).any(), s.produced + 1)
    return state, Chunk(token[0], jax.tree.map(lambda a: a[0], info), Weighed(ids, probs, penalties, scores, chosen))


def empty(mode: ContrastiveMode, steps: int) -> Chunk:
    k = mode.k
    weighed = Weighed(jnp.zeros((steps, k), jnp.int32), jnp.zeros((steps, k)), jnp.zeros((steps, k)),
                      jnp.zeros((steps, k)), jnp.zeros((steps,), jnp.int32))
    return Chunk(jnp.full((steps,), -1, jnp.int32), token_choice.empty_info(steps, len(mode.tokens.chain.stages)),
                 weighed)


def finished(state: ContrastiveState) -> jax.Array:
    return state.done


def contrastive_kernel(engine: Engine, bucket: int, mode: ContrastiveMode) -> Kernel[ContrastiveState]:
    """The search's programs. Its start reads only the context's capacity and the chain's history of the mode
    (a new top_k compiles no start), and so does growth (the context buffer is already full size)."""
    shape, hidden = engine.shape_struct, int(engine.config.hidden_size)
    args = ContrastiveArgs(token_choice.arg_specs(mode.tokens), np.float32(0), np.float32(0))
    prefilled = (shape((1, engine.vocab_size), jnp.float32), shape((1, bucket, hidden), jnp.float32))
    return Kernel(engine=engine, name="contrastive", mode=mode, bucket=bucket,
                  start=partial(start, engine.vocab_size, mode), step=partial(step, engine, mode),
                  empty=partial(empty, mode), finished=finished, args=abstract(engine, args), prefilled=prefilled,
                  start_key=(mode.capacity, mode.tokens.needs),
                  shapes=(mode.capacity, mode.tokens.needs))


def prefill_program(engine: Engine, bucket: int, layouts: Layouts, layer: int) -> Pending:
    """The engine's prefill program, handing the start the context's hidden states at `layer` too."""
    return engine.prefill_program(bucket, layouts, own=partial(_prefill, engine, layer=layer),
                                  key=("contrastive", layer))

"""One beam-search step as array operations, with the semantics of transformers' GenerationMixin._beam_search.

transformers' beam search is already vectorized (`_get_top_k_continuations`, `_get_running_beams_for_next_
iteration`, `_update_finished_beams`, `_check_early_stop_heuristic`); this is the same arithmetic in jnp, for a
batch of one prompt, so it runs inside the jitted decode loop. Every array has a fixed shape: K running
hypotheses, C = max(2, 1 + number of EOS ids) x K candidates per step, K finished slots, and a capacity of
token columns. The step also returns what the page's beam tree shows (each candidate's parent, token, score,
whether it finished, which ones continue) as fixed-shape rows, so a decode call hands them back with its chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, NamedTuple

import jax
import jax.numpy as jnp

from playground.backends.jax.chain import chain
from playground.backends.jax.chain.chain import Chain, History, Leaf, gathered, pushed
from playground.backends.jax.chain.token_choice import ChainArgs

# transformers' "very large negative" score: it masks hypotheses out of a top-k without -inf arithmetic
NEG = -1.0e9
# token columns come in multiples of this, so nearby max_new_tokens share their compiled programs
CAPACITY_GRANULE = 64


@dataclass(frozen=True)
class BeamMode:
    """The static half of a beam search (shapes and branches): it keys compiled programs."""

    beams: int  # K running hypotheses (and K finished slots)
    capacity: int  # token columns per hypothesis: max_new_tokens rounded up to CAPACITY_GRANULE
    eos: tuple[int, ...]
    chain: Chain  # the logits chain, applied to log-probabilities: processors, and the filters when it samples
    samples: bool = False  # beam sampling: the C continuations are drawn (without replacement), not the best C

    @property
    def candidates(self) -> int:
        """Continuations kept per step: enough that K survive even if the best ones all end at an EOS."""
        return max(2, 1 + len(self.eos)) * self.beams


def capacity_for(max_new_tokens: int) -> int:
    return -(-max_new_tokens // CAPACITY_GRANULE) * CAPACITY_GRANULE


class BeamArgs(NamedTuple, Generic[Leaf]):
    """The traced half: values that never recompile."""

    length_penalty: Leaf  # () f32
    early_stopping: Leaf  # () bool
    last: Leaf  # () i32: the step count at which every candidate stops (max_new_tokens; sooner after a stop)
    chain: ChainArgs  # the chain's arguments


class Hypotheses(NamedTuple, Generic[Leaf]):
    """The search's state apart from the model's cache: running and finished hypotheses."""

    running: Leaf  # (K, capacity) int32 tokens of each running hypothesis
    running_scores: Leaf  # (K,) f32 cumulative log-probabilities
    finished: Leaf  # (K, capacity) int32, best first
    finished_scores: Leaf  # (K,) f32, length-penalized
    finished_lengths: Leaf  # (K,) int32
    is_finished: Leaf  # (K,) bool: the slot holds a finished hypothesis
    improvable: Leaf  # () bool: the running beams may still beat the finished ones
    history: History[Leaf]  # each hypothesis's text so far (K rows), as far as the chain reads it
    produced: Leaf  # () int32 steps done (tokens per hypothesis)
    done: Leaf  # () bool: the search is over


class StepRecord(NamedTuple):
    """What one step weighed, for the beam tree: C candidates, best first, and which K continue."""

    parents: jax.Array  # (C,) int32 running beam each candidate extends
    tokens: jax.Array  # (C,) int32
    scores: jax.Array  # (C,) f32 cumulative log-probability (before the length penalty)
    finished: jax.Array  # (C,) bool hit EOS or the length limit
    kept: jax.Array  # (K,) int32 candidates that become the running beams, in beam order


def initial(history: History[jax.Array], mode: BeamMode) -> Hypotheses[jax.Array]:
    """Before the first step: only beam 0 is live (the others start at NEG, so the first step does not pick
    the same token K times), nothing finished. `history` (one row) is the prompt's."""
    k, cols = mode.beams, mode.capacity
    zeros = jnp.zeros((k, cols), jnp.int32)
    return Hypotheses(
        running=zeros, running_scores=jnp.full((k,), NEG, jnp.float32).at[0].set(0.0),
        finished=zeros, finished_scores=jnp.full((k,), NEG, jnp.float32), finished_lengths=jnp.zeros((k,), jnp.int32),
        is_finished=jnp.zeros((k,), bool), improvable=jnp.bool_(True),
        history=gathered(history, jnp.zeros((k,), jnp.int32)), produced=jnp.int32(0), done=jnp.bool_(False))


def log_probs(logits: jax.Array, hyps: Hypotheses[jax.Array], mode: BeamMode, args: BeamArgs[jax.Array],
              key: jax.Array | None = None) -> jax.Array:
    """(K, V) log-softmax of the logits, then the chain's processors (and warpers, when it samples), as
    transformers' beam search applies its list to log-probabilities (a repetition penalty multiplies them: they
    are negative). `key` is the chain's own, for a stage that draws."""
    scores = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    applied = chain.apply(scores, hyps.history, hyps.produced, key, mode.chain, args.chain)
    return chain.in_vocab(applied.cands, scores.shape[-1], -jnp.inf)


def _top_continuations(scores: jax.Array, hyps: Hypotheses[jax.Array], mode: BeamMode, args: BeamArgs[jax.Array],
                       draw: jax.Array | None) -> tuple[StepRecord, jax.Array]:
    """_get_top_k_continuations: the C best (beam, token) pairs by cumulative score, or C drawn without replacement
    from the softmax of the cumulative scores when sampling (`draw`: the step's key; Gumbel top-k draws as
    torch.multinomial does, in the order drawn); their sequences (C, capacity) and whether each stops here (EOS,
    or the length limit for all)."""
    vocab = scores.shape[-1]
    total = (scores + hyps.running_scores[:, None]).reshape(-1)  # (K * V,)
    if draw is None:
        top_scores, index = jax.lax.top_k(total, mode.candidates)
    else:
        index = jax.lax.top_k(total + jax.random.gumbel(draw, total.shape), mode.candidates)[1]
        top_scores = total[index]
    parents, tokens = (index // vocab).astype(jnp.int32), (index % vocab).astype(jnp.int32)
    sequences = hyps.running[parents].at[:, hyps.produced].set(tokens)  # (C, capacity)
    hits = jnp.isin(tokens, jnp.asarray(mode.eos or (-1,))) | (hyps.produced + 1 >= args.last)
    record = StepRecord(parents, tokens, top_scores, hits, jnp.zeros((mode.beams,), jnp.int32))
    return record, sequences


def _update_finished(hyps: Hypotheses[jax.Array], record: StepRecord, sequences: jax.Array, mode: BeamMode,
                     args: BeamArgs[jax.Array]) -> tuple[jax.Array, ...]:
    """_update_finished_beams: the top K candidates that just stopped, length-penalized, merged with the finished
    slots; the best K stay (finished, scores, lengths, is_finished)."""
    length = hyps.produced + 1
    just = record.finished & (jnp.arange(mode.candidates) < mode.beams)
    scores = record.scores / length.astype(jnp.float32) ** args.length_penalty
    full = jnp.all(hyps.is_finished) & args.early_stopping
    scores = scores + full * NEG + (~hyps.improvable) * NEG + (~just) * NEG
    merged_scores = jnp.concatenate([hyps.finished_scores, scores])
    best = jax.lax.top_k(merged_scores, mode.beams)[1]
    lengths = jnp.concatenate([hyps.finished_lengths, jnp.full((mode.candidates,), length, jnp.int32)])
    return (jnp.concatenate([hyps.finished, sequences])[best], merged_scores[best], lengths[best],
            jnp.concatenate([hyps.is_finished, just])[best])


def _still_improvable(hyps: Hypotheses[jax.Array], running_scores: jax.Array, finished_scores: jax.Array,
                      is_finished: jax.Array, args: BeamArgs[jax.Array]) -> jax.Array:
    """_check_early_stop_heuristic (early_stopping True or False): can the best running beam, at its current
    length, still beat the worst finished one?"""
    length = (hyps.produced + 1).astype(jnp.float32)
    best_running = running_scores[0] / length ** args.length_penalty
    worst_finished = jnp.where(is_finished, jnp.min(finished_scores), NEG)
    return hyps.improvable & jnp.any(best_running > worst_finished)


def step(logits: jax.Array, hyps: Hypotheses[jax.Array], mode: BeamMode, args: BeamArgs[jax.Array],
         key: jax.Array) -> tuple[Hypotheses[jax.Array], jax.Array, jax.Array, StepRecord, jax.Array]:
    """One beam-search step for the running beams' logits (K, V). Returns the new hypotheses, the parent of each
    new running beam (K,) (the cache rows to gather), their last tokens (K,), the step's record and the key to
    carry on (used only by a chain stage that draws, or by beam sampling)."""
    chain_key = draw = None
    if mode.chain.random:
        key, chain_key = jax.random.split(key)
    if mode.samples:
        key, draw = jax.random.split(key)
    record, sequences = _top_continuations(log_probs(logits, hyps, mode, args, chain_key), hyps, mode, args, draw)
    # _get_running_beams_for_next_iteration: the best K candidates that did not stop
    masked = record.scores + record.finished * NEG
    kept = jax.lax.top_k(masked, mode.beams)[1].astype(jnp.int32)
    parents, tokens = record.parents[kept], record.tokens[kept]
    finished, finished_scores, lengths, is_finished = _update_finished(hyps, record, sequences, mode, args)
    improvable = _still_improvable(hyps, masked[kept], finished_scores, is_finished, args)
    history = pushed(gathered(hyps.history, parents), tokens, mode.chain.needs)
    # _beam_search_has_unfinished_sequences
    open_beam = ~(jnp.all(is_finished) & args.early_stopping)
    go_on = improvable & open_beam & ~jnp.all(record.finished)
    new = Hypotheses(sequences[kept], masked[kept], finished, finished_scores, lengths, is_finished, improvable,
                     history, hyps.produced + 1, ~go_on)
    return new, parents, tokens, record._replace(kept=kept), key


def empty_records(steps: int, mode: BeamMode) -> StepRecord:
    """Rows for `steps` steps, filled as a decode call runs them."""
    c, k = mode.candidates, mode.beams
    return StepRecord(jnp.zeros((steps, c), jnp.int32), jnp.zeros((steps, c), jnp.int32),
                      jnp.zeros((steps, c), jnp.float32), jnp.zeros((steps, c), bool), jnp.zeros((steps, k), jnp.int32))

"""One step of diverse (group) beam search as array operations, with transformers 4.52's `_group_beam_search`.

The same semantics as the PyTorch port (playground/backends/torch/diverse_beam.py), in jnp and fixed shapes, so
that the step runs inside the jitted decode loop: G groups of S = K / G beams share one batch of K rows. A step
takes the groups in order (a lax.scan); group g's log-softmax loses diversity_penalty times the number of rows of
the earlier groups that chose each token at this step (4.52's Hamming processor, placed before the logits chain,
as 4.52 placed it before the other processors), the chain runs on the group's rows, the group's running scores
are added and its max(2, 1 + EOS ids) x S best continuations go through 4.52's `BeamSearchScorer.process`: an EOS
among the best S becomes a finished hypothesis (its length counts the EOS), the first S others continue. The
finished hypotheses are 4.52's `BeamHypotheses`, S slots per group kept in insertion order (a stamp each), so
that the host's `finalize` (diverse_beam.py) pools and ranks them as 4.52 did. A group that is done runs on the
pad token at score 0, as 4.52's did; the search is over when every group is.

These are not the vectorised `_beam_search` semantics (beam_search.py): the length limit finishes nothing here
(the running beams join their group's hypotheses at the end) and the Hamming penalty stays in the running score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, NamedTuple

import jax
import jax.numpy as jnp

from playground import registry
from playground.backends.jax.chain import chain
from playground.backends.jax.chain.chain import Chain, History, Leaf, gathered, pushed
from playground.backends.jax.chain.token_choice import ChainArgs
from playground.backends.jax.strategies.beam_search import NEG

STAMP_NONE = 2**31 - 1  # an empty slot's insertion stamp: later than any real one


@dataclass(frozen=True)
class DiverseBeamMode:
    """The static half of a group beam search (shapes and branches): it keys compiled programs."""

    beams: int  # K rows: every group's beams
    groups: int  # G groups of beams // groups each
    capacity: int  # token columns per hypothesis
    eos: tuple[int, ...]
    pad: int  # what a done group's rows run on (4.52's pad_token_id)
    chain: Chain

    @property
    def size(self) -> int:
        """S beams per group (and S finished slots)."""
        return self.beams // self.groups

    @property
    def candidates(self) -> int:
        """Continuations weighed per group and step: enough that S continue even if the best all end."""
        return max(2, 1 + len(self.eos)) * self.size


class DiverseBeamArgs(NamedTuple, Generic[Leaf]):
    """The traced half: values that never recompile."""

    length_penalty: Leaf  # () f32
    early_stopping: Leaf  # () bool
    diversity: Leaf  # () f32 diversity_penalty
    chain: ChainArgs


class GroupHyps(NamedTuple, Generic[Leaf]):
    """The search's state apart from the model's cache. Row r belongs to group r // S; so do finished slots."""

    running: Leaf  # (K, capacity) int32 each row's tokens
    running_scores: Leaf  # (K,) f32 summed log-probabilities less the penalties paid (4.52 keeps both in one)
    finished: Leaf  # (K, capacity) int32 a finished hypothesis's tokens, its EOS left out (as 4.52 stored them)
    finished_scores: Leaf  # (K,) f32 length-penalized
    finished_lengths: Leaf  # (K,) int32 new tokens, its EOS counted
    held: Leaf  # (K,) bool the slot holds a hypothesis
    stamps: Leaf  # (K,) int32 when it was added (4.52's list order)
    stamp: Leaf  # () int32 the next stamp
    group_done: Leaf  # (G,) bool
    history: History[Leaf]
    produced: Leaf  # () int32 steps done
    done: Leaf  # () bool every group is done


class GroupRecord(NamedTuple):
    """One step as the page's tree shows it, per group: its C candidates best first and which S continue."""

    active: jax.Array  # (G,) bool the group was not done before this step (a done group records nothing)
    parents: jax.Array  # (G, C) int32 the row each candidate extends
    tokens: jax.Array  # (G, C) int32
    scores: jax.Array  # (G, C) f32 running score after the token (penalties in)
    penalties: jax.Array  # (G, C) f32 the diversity penalty the token paid
    finished: jax.Array  # (G, C) bool an EOS among the best S: a finished hypothesis
    kept: jax.Array  # (G, S) int32 the candidates that continue, in row order


class _Slots(NamedTuple):
    """One group's finished hypotheses (S slots): 4.52's BeamHypotheses."""

    tokens: jax.Array  # (S, capacity)
    scores: jax.Array  # (S,)
    lengths: jax.Array  # (S,)
    held: jax.Array  # (S,)
    stamps: jax.Array  # (S,)


class _Group(NamedTuple):
    """What the scan over groups reads of one group (leading axis G before the scan slices it)."""

    start: jax.Array  # () its first row
    log_probs: jax.Array  # (S, V)
    running: jax.Array  # (S, capacity)
    scores: jax.Array  # (S,)
    slots: _Slots
    done: jax.Array  # ()
    ids: jax.Array  # history rows (S, H)
    seen: jax.Array  # (S, V or 1)
    counts: jax.Array  # (S, V or 1)
    row_args: tuple[tuple[jax.Array, ...], ...]  # the per-row stages' arguments, the group's rows


def initial(history: History[jax.Array], mode: DiverseBeamMode) -> GroupHyps[jax.Array]:
    """Before the first step: one live beam per group (its others at NEG, so that a group does not pick the same
    token S times), nothing finished. `history` (one row) is the prompt's."""
    k, cols = mode.beams, mode.capacity
    zeros = jnp.zeros((k, cols), jnp.int32)
    scores = jnp.full((mode.groups, mode.size), NEG, jnp.float32).at[:, 0].set(0.0).reshape(k)
    return GroupHyps(
        running=zeros, running_scores=scores, finished=zeros, finished_scores=jnp.full((k,), NEG, jnp.float32),
        finished_lengths=jnp.zeros((k,), jnp.int32), held=jnp.zeros((k,), bool),
        stamps=jnp.full((k,), STAMP_NONE, jnp.int32), stamp=jnp.int32(0), group_done=jnp.zeros((mode.groups,), bool),
        history=gathered(history, jnp.zeros((k,), jnp.int32)), produced=jnp.int32(0), done=jnp.bool_(False))


def _per_row(chain_: Chain) -> tuple[bool, ...]:
    """Which stages take an argument row per beam (the constraint's mask): each group reads its own rows."""
    makers = [registry.processor(name).plugin("jax") for name in chain_.names]
    return tuple(make is not None and bool(make().per_row) for make in makers)


def _add(slots: _Slots, take: jax.Array, score: jax.Array, tokens: jax.Array, length: jax.Array,
         stamp: jax.Array) -> tuple[_Slots, jax.Array]:
    """BeamHypotheses.add: a hypothesis joins while the group holds fewer than S, or when it beats the worst,
    which then leaves (of equal worst ones the earliest added, as 4.52's sort by (score, list index) drops)."""
    size = slots.held.shape[0]
    count = slots.held.sum()
    worst = jnp.min(jnp.where(slots.held, slots.scores, jnp.inf))
    accept = take & ((count < size) | (score > worst))
    weakest = jnp.argmin(jnp.where(slots.held & (slots.scores == worst), slots.stamps, STAMP_NONE))
    slot = jnp.where(count < size, jnp.argmax(~slots.held), weakest)

    def put(array: jax.Array, value: jax.Array) -> jax.Array:
        return array.at[slot].set(jnp.where(accept, value, array[slot]))

    new = _Slots(put(slots.tokens, tokens), put(slots.scores, score), put(slots.lengths, length),
                 put(slots.held, jnp.bool_(True)), put(slots.stamps, stamp))
    return new, stamp + accept.astype(jnp.int32)


def _is_done(slots: _Slots, best: jax.Array, length: jax.Array, args: DiverseBeamArgs[jax.Array]) -> jax.Array:
    """BeamHypotheses.is_done: S finished, and early stopping, or no running beam at this length (the best
    candidate's score) can beat the worst finished one."""
    full = slots.held.sum() >= slots.held.shape[0]
    worst = jnp.min(jnp.where(slots.held, slots.scores, jnp.inf))
    return full & (args.early_stopping | (worst >= best / length ** args.length_penalty))


def _top_of_rows(scores: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """lax.top_k over the (S, V) scores flattened, as the best k of each row's best k: the same values and flat
    indices in the same order, ties included (each row's best are in column order, the rows in row order). XLA's
    CPU backend turned the flattened top_k of this step into a full sort of S x V (SmolLM2: 20 ms of a group's
    step); row by row it is its top-k kernel."""
    row_top, row_index = jax.lax.top_k(scores, k)  # (S, k)
    top, pick = jax.lax.top_k(row_top.reshape(-1), k)
    return top, (pick // k) * scores.shape[-1] + row_index.reshape(-1)[pick]


def _group_step(carry: tuple[jax.Array, jax.Array], group: _Group, *, hyps: GroupHyps[jax.Array], mode: DiverseBeamMode,
                args: DiverseBeamArgs[jax.Array], shared: tuple[tuple[jax.Array, ...], ...]) -> tuple[tuple, tuple]:
    """One group's part of a step: the Hamming penalty, the chain, the group's best continuations through
    4.52's `process`, its finished hypotheses and whether it is done. `carry` counts, per token, the earlier
    groups' rows that chose it at this step, and holds the next insertion stamp."""
    taken, stamp = carry
    size, vocab, length = mode.size, group.log_probs.shape[-1], hyps.produced + 1
    penalty = args.diversity * taken  # (V,) what each token costs this group
    # diverse beam search never samples, so no stage of its chain carries a state of its own
    history = History(group.ids, hyps.history.length, group.seen, group.counts,
                      jnp.zeros((group.ids.shape[0], 0), jnp.float32))
    values, rows = [], iter(group.row_args)
    for own, stage_args in zip(_per_row(mode.chain), shared, strict=True):
        values.append(next(rows) if own else stage_args)
    applied = chain.apply(group.log_probs - penalty, history, hyps.produced, None, mode.chain, tuple(values))
    processed = chain.in_vocab(applied.cands, vocab, -jnp.inf)
    top, index = _top_of_rows(processed + group.scores[:, None], mode.candidates)
    parents, tokens = (index // vocab).astype(jnp.int32), (index % vocab).astype(jnp.int32)
    rank = jnp.arange(mode.candidates)
    is_eos = jnp.isin(tokens, jnp.asarray(mode.eos or (-1,)))
    finishing = is_eos & (rank < size) & ~group.done
    kept = jax.lax.top_k(jnp.where(is_eos, -(mode.candidates + rank), -rank).astype(jnp.float32), size)[1]
    slots, penalized = group.slots, length.astype(jnp.float32) ** args.length_penalty
    for r in range(size):  # 4.52 adds them best first, one at a time: each add may change the worst
        slots, stamp = _add(slots, finishing[r], top[r] / penalized, group.running[parents[r]], length, stamp)
    done = group.done | _is_done(slots, top[0], length.astype(jnp.float32), args)
    new_tokens = jnp.where(group.done, mode.pad, tokens[kept])
    new_parents = jnp.where(group.done, 0, parents[kept])
    new_scores = jnp.where(group.done, 0.0, top[kept])
    running = group.running[new_parents].at[:, hyps.produced].set(new_tokens)
    record = GroupRecord(~group.done, group.start + parents, tokens, top, penalty[tokens], finishing,
                         kept.astype(jnp.int32))
    return (taken.at[new_tokens].add(1.0), stamp), (group.start + new_parents, new_tokens, running, new_scores, slots,
                                                    done, record)


def _split(hyps: GroupHyps[jax.Array], log_probs: jax.Array, mode: DiverseBeamMode,
           args: DiverseBeamArgs[jax.Array]) -> tuple[_Group, tuple[tuple[jax.Array, ...], ...]]:
    """The state cut into groups (leading axis G) for the scan, and the chain arguments all groups share."""
    g, s = mode.groups, mode.size

    def cut(a: jax.Array) -> jax.Array:
        return a.reshape(g, s, *a.shape[1:])

    per_row = _per_row(mode.chain)
    row_args = tuple(tuple(cut(a) for a in stage) for own, stage in zip(per_row, args.chain, strict=True) if own)
    shared = tuple(() if own else stage for own, stage in zip(per_row, args.chain, strict=True))
    slots = _Slots(cut(hyps.finished), cut(hyps.finished_scores), cut(hyps.finished_lengths), cut(hyps.held),
                   cut(hyps.stamps))
    history = hyps.history
    groups = _Group(jnp.arange(g, dtype=jnp.int32) * s, cut(log_probs), cut(hyps.running), cut(hyps.running_scores),
                    slots, hyps.group_done, cut(history.ids), cut(history.seen), cut(history.counts), row_args)
    return groups, shared


def step(logits: jax.Array, hyps: GroupHyps[jax.Array], mode: DiverseBeamMode,
         args: DiverseBeamArgs[jax.Array]) -> tuple[GroupHyps[jax.Array], jax.Array, jax.Array, GroupRecord]:
    """One group beam step for the rows' logits (K, V): the new hypotheses, each row's parent row (K,) (the
    cache rows to gather), its new token (K,), and the step's record."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    groups, shared = _split(hyps, log_probs, mode, args)

    def body(carry: tuple, group: _Group) -> tuple[tuple, tuple]:
        return _group_step(carry, group, hyps=hyps, mode=mode, args=args, shared=shared)

    start = (jnp.zeros((logits.shape[-1],), jnp.float32), hyps.stamp)
    (_, stamp), out = jax.lax.scan(body, start, groups)
    parents, tokens, running, scores, slots, group_done, record = out
    k = mode.beams

    def flat(a: jax.Array) -> jax.Array:
        return a.reshape(k, *a.shape[2:])

    parents, tokens = flat(parents), flat(tokens)
    history = pushed(gathered(hyps.history, parents), tokens, mode.chain.needs)
    new = GroupHyps(flat(running), flat(scores), flat(slots.tokens), flat(slots.scores), flat(slots.lengths),
                    flat(slots.held), flat(slots.stamps), stamp, group_done, history, hyps.produced + 1,
                    jnp.all(group_done))
    return new, parents, tokens, record


def empty_records(steps: int, mode: DiverseBeamMode) -> GroupRecord:
    """Rows for `steps` steps, filled as a decode call runs them."""
    g, c, s = mode.groups, mode.candidates, mode.size
    return GroupRecord(jnp.zeros((steps, g), bool), jnp.zeros((steps, g, c), jnp.int32),
                       jnp.zeros((steps, g, c), jnp.int32), jnp.zeros((steps, g, c), jnp.float32),
                       jnp.zeros((steps, g, c), jnp.float32), jnp.zeros((steps, g, c), bool),
                       jnp.zeros((steps, g, s), jnp.int32))

"""The logits chain inside jit: one function applies every stage a run has, in every program that picks or scores
tokens (decode steps, verify passes, beam steps, draft models).

Each stage is a registry entry (playground/registry/entries.py, Processor) whose `jax()` gives a `JaxStage`: its
static key (what sets a shape or a branch: top-k's k, the n-gram length) joins the compile key, its arguments
(every other value) are traced, so a new temperature, penalty or threshold never recompiles. A stage sees a
candidate set: logits (B, N) with removed entries at -inf, over the whole vocabulary (N = V) until top-k narrows
it to k entries with their token ids. What a stage reads of the text so far (the tokens seen, generated counts,
the ids themselves) is a `History` the decode state carries, kept only as far as some stage needs it. A stage
with state of its own (mirostat v2's μ, adaptive-p's running average) keeps it in the history too, one float per
row: it reads it at each step and, once the token is drawn, `settle` moves it by what the token's probability
was under that stage's distribution.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, cast

import jax
import jax.numpy as jnp
import numpy as np

from playground import registry
from playground.registry import chain
from playground.spec import RunSpec

# A program's inputs: arrays when it runs, shape structs in their place when it is lowered ahead of its first call.
Leaf = TypeVar("Leaf", jax.Array, jax.ShapeDtypeStruct)
HISTORY_GRANULE = 64  # history capacities come in multiples of this, so nearby lengths share their programs


@dataclass(frozen=True)
class Needs:
    """What of the text so far a chain reads (static: it sets the decode state's shapes)."""

    ids: int = 0  # the history's capacity in tokens (prompt bucket + new tokens), 0: ids not kept
    seen: bool = False  # which tokens occur in the prompt or the generated text
    counts: bool = False  # how often each token was generated (not counting the prompt)
    carry: tuple[str, ...] = ()  # the names of the floats stages carry from token to token (one per name, in order)


class History(NamedTuple, Generic[Leaf]):
    """The text so far, as the chain's stages read it; an unused part is a (B, 1) placeholder."""

    ids: Leaf  # (B, H) int32: the prompt, then the generated tokens
    length: Leaf  # () int32: real entries of ids
    seen: Leaf  # (B, V) bool
    counts: Leaf  # (B, V) int32
    carry: Leaf  # (B, C) float32: the stages' own state (Needs.carry names each column)


class Context(NamedTuple):
    """What a stage's key and arguments may depend on besides the spec: the model's side of a request."""

    vocab_size: int
    eos: tuple[int, ...]
    tokenizer: Any  # the main model's tokenizer (DRY's sequence breakers are strings)
    rows: int = 1  # rows a program picks for that may each need an argument of their own (beams, verify positions)
    keep: int = 1  # transformers' min_tokens_to_keep: no filter leaves fewer (beam sampling: one more than the EOS ids)
    breakers: frozenset[int] | None = None  # DRY's sequence breakers as ids (no tokenizer: the sampler lab)


class Candidates(NamedTuple):
    """A candidate set: logits (B, N), -inf where removed, and their token ids (B, N); ids None: N = V."""

    values: jax.Array
    ids: jax.Array | None


class View(NamedTuple):
    """What a stage reads besides its candidates."""

    history: History[jax.Array]
    produced: jax.Array  # () tokens generated before this one
    key: jax.Array | None  # this stage's random key (a stage with `random`), else None
    carry: jax.Array | None = None  # (B, 1) this stage's own state at this step (a stage that carries one)

    def table(self, cands: Candidates, rows: jax.Array) -> jax.Array:
        """A per-token table (B, V) read at the candidates: (B, N)."""
        return rows if cands.ids is None else jnp.take_along_axis(rows, cands.ids, axis=-1)


class JaxStage(Protocol):
    """A stage's JAX side."""

    needs: Needs  # what of the history it reads (`ids`: any capacity > 0 means "the ids")
    random: bool  # draws from a key of its own at every call
    per_row: bool  # its arguments have a leading axis of Context.rows: row i of a batch reads row i

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        """What sets a shape or a branch: part of the compile key (() when nothing does)."""
        ...

    def args(self, spec: RunSpec, context: Context) -> tuple[Any, ...]:
        """Its traced values (NumPy scalars and arrays): new values never recompile."""
        ...

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        """The candidates after this stage (a filter sets entries to -inf; only top-k changes the set)."""
        ...


class CarryingStage(JaxStage, Protocol):
    """A stage whose `needs.carry` names one float it carries per row from token to token."""

    def initial(self, args: tuple[jax.Array, ...]) -> jax.Array:
        """The state before the first token (a scalar)."""
        ...

    def observed(self, before: Candidates, after: Candidates) -> Candidates:
        """Probabilities laid out as a candidate set: the chosen token's entry settles the state."""
        ...

    def settled(self, carry: jax.Array, chosen: jax.Array, args: tuple[jax.Array, ...]) -> jax.Array:
        """The state (B, 1) after a token whose `observed` probability was `chosen` (B, 1)."""
        ...


@dataclass(frozen=True)
class Chain:
    """The static half of a run's chain: its stages in order with their static keys, and what they read. Part
    of every compile key of a program that picks or scores tokens."""

    stages: tuple[tuple[str, Hashable], ...] = ()
    needs: Needs = Needs()
    random: bool = False  # some stage draws (the select step then splits one more key)
    arg_shapes: tuple[tuple[tuple[tuple[int, ...], str], ...], ...] = ()  # per stage: its arguments' (shape, dtype)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.stages)


def _stage(name: str) -> JaxStage:
    make = registry.processor(name).plugin("jax")
    if make is None:  # RunSpec refuses such a stage on the JAX path before a run gets here
        raise ValueError(f"the logits chain's stage {name!r} has no JAX twin")
    stage: JaxStage = make()
    return stage


def build(spec: RunSpec, context: Context, *, sampling: bool | None = None,
          history: int = 0, keep_history: bool = True) -> tuple[Chain, tuple[tuple[np.ndarray, ...], ...]]:
    """The chain of `spec` (its sampling stages as the strategy says, or as `sampling` overrides) and its
    arguments on the host. `history` is the ids' capacity should a stage read them; `keep_history=False`
    leaves out the stages that read the text so far (a draft model's proposals need not follow them)."""
    stages, args = [], []
    needs = Needs()
    random = False
    for processor in chain.stages(spec, sampling=sampling):
        stage = _stage(processor.name)
        reads = stage.needs
        if not keep_history and (reads.ids or reads.seen or reads.counts or reads.carry):
            continue
        stages.append((processor.name, stage.static(spec, context)))
        args.append(tuple(np.asarray(a) for a in stage.args(spec, context)))
        needs = Needs(ids=history if (reads.ids or needs.ids) else 0, seen=needs.seen or reads.seen,
                      counts=needs.counts or reads.counts, carry=needs.carry + reads.carry)
        random = random or stage.random
    shapes = tuple(tuple((a.shape, str(a.dtype)) for a in stage_args) for stage_args in args)
    return Chain(tuple(stages), needs, random, shapes), tuple(args)


def arg_specs(chain_: Chain) -> tuple[tuple[jax.ShapeDtypeStruct, ...], ...]:
    """Shape structs of the chain's arguments (for lowering a program ahead of its first call)."""
    return tuple(tuple(jax.ShapeDtypeStruct(shape, np.dtype(dtype)) for shape, dtype in stage)
                 for stage in chain_.arg_shapes)


def history_capacity(bucket: int, new_tokens: int) -> int:
    return bucket + -(-new_tokens // HISTORY_GRANULE) * HISTORY_GRANULE


def history_shapes(needs: Needs, batch: int, vocab_size: int) -> History[jax.ShapeDtypeStruct]:
    def struct(width: int, used: bool, dtype: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct((batch, width if used else 1), dtype)

    return History(struct(needs.ids, needs.ids > 0, jnp.int32), jax.ShapeDtypeStruct((), jnp.int32),
                   struct(vocab_size, needs.seen, jnp.bool_), struct(vocab_size, needs.counts, jnp.int32),
                   jax.ShapeDtypeStruct((batch, len(needs.carry)), jnp.float32))


def start_history(ids: jax.Array, length: jax.Array, needs: Needs, vocab_size: int) -> History[jax.Array]:
    """The prompt's history: ids (B, P) padded on the right, `length` of them real."""
    batch, width = ids.shape
    valid = jnp.arange(width)[None, :] < length  # (1, P)
    if needs.ids:
        kept = jnp.zeros((batch, needs.ids), jnp.int32).at[:, :width].set(jnp.where(valid, ids, 0))
    else:
        kept = jnp.zeros((batch, 1), jnp.int32)
    seen = jnp.zeros((batch, vocab_size if needs.seen else 1), bool)
    if needs.seen:
        rows = jnp.broadcast_to(jnp.arange(batch)[:, None], ids.shape)
        seen = seen.at[rows, jnp.where(valid, ids, vocab_size)].set(True, mode="drop")
    counts = jnp.zeros((batch, vocab_size if needs.counts else 1), jnp.int32)
    carry = jnp.zeros((batch, len(needs.carry)), jnp.float32)  # each stage starts from its `initial` (produced 0)
    return History(kept, length.astype(jnp.int32), seen, counts, carry)


def pushed(history: History[jax.Array], tokens: jax.Array, needs: Needs,
           carry: jax.Array | None = None) -> History[jax.Array]:
    """The history after tokens (B, W) (or (B,)); entries < 0 are not tokens (past a verify pass's kept ones)
    and are left out. Every row takes its tokens at the same positions. `carry`: the stages' state after these
    tokens (`settle`), where some stage carries one."""
    tokens = tokens[:, None] if tokens.ndim == 1 else tokens
    batch, width = tokens.shape
    valid = tokens >= 0  # (B, W)
    count = valid[0].sum().astype(jnp.int32)  # the rows move together
    ids, seen, counts = history.ids, history.seen, history.counts
    rows = jnp.broadcast_to(jnp.arange(batch)[:, None], tokens.shape)
    if needs.ids:
        columns = jnp.where(valid, history.length + jnp.arange(width)[None, :], ids.shape[1])
        ids = ids.at[rows, columns].set(tokens, mode="drop")
    if needs.seen:
        seen = seen.at[rows, jnp.where(valid, tokens, seen.shape[1])].set(True, mode="drop")
    if needs.counts:
        counts = counts.at[rows, jnp.where(valid, tokens, counts.shape[1])].add(1, mode="drop")
    return History(ids, history.length + count, seen, counts, history.carry if carry is None else carry)


def gathered(history: History[jax.Array], rows: jax.Array) -> History[jax.Array]:
    """Beam search: each new hypothesis takes its parent's history (rows (K,))."""
    return History(history.ids[rows], history.length, history.seen[rows], history.counts[rows], history.carry[rows])


class Applied(NamedTuple):
    """The chain's output for one row batch."""

    cands: Candidates  # the distribution to pick from
    cut: jax.Array  # (B, A) int32: per watched token, 1 + the position of the stage that removed it; 0: it stayed
    removed: jax.Array  # (B, S) int32: tokens each stage removed
    moved: jax.Array  # (B, S) float32: probability mass each stage moved (total variation, before vs after)
    carried: jax.Array  # (B, C) float32: the state each carrying stage read at this step
    observed: tuple[jax.Array, ...] = ()  # per carrying stage: (B, V) the probabilities that settle its state


def in_vocab(cands: Candidates, vocab: int, fill: float) -> jax.Array:
    """The candidates' values (or anything shaped like them) as a (B, V) table, `fill` where a token is not a
    candidate."""
    if cands.ids is None:
        return cands.values
    rows = jnp.arange(cands.values.shape[0])[:, None]
    return jnp.full((cands.values.shape[0], vocab), fill, cands.values.dtype).at[rows, cands.ids].set(cands.values)


def _at(cands: Candidates, table: jax.Array, tokens: jax.Array, fill: float) -> jax.Array:
    """`table` (B, N), laid out like the candidates, read at token ids (B, A): `fill` for a token not among them.
    A small membership test (A x N) once top-k has narrowed the set; a plain read before."""
    if cands.ids is None:
        return jnp.take_along_axis(table, tokens, axis=-1)
    hit = cands.ids[:, None, :] == tokens[:, :, None]  # (B, A, N)
    return jnp.where(hit.any(axis=-1), jnp.sum(jnp.where(hit, table[:, None, :], 0), axis=-1), fill)


def _record(before: Candidates, before_probs: jax.Array, after: Candidates,
            after_probs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(B,) tokens a stage removed and the mass it moved (total variation between before and after), read in the
    set's own space: one pass over the N candidates, no (B, V) table."""
    finite_before = jnp.isfinite(before.values).sum(axis=-1)
    finite_after = jnp.isfinite(after.values).sum(axis=-1)
    if after.ids is before.ids or after.ids is None:
        moved = 0.5 * jnp.abs(after_probs - before_probs).sum(axis=-1)
    else:  # a narrowing: the mass outside the new set moved into it
        kept = _at(before, before_probs, after.ids, 0.0)  # (B, N')
        moved = 0.5 * (jnp.abs(after_probs - kept).sum(axis=-1) + 1.0 - kept.sum(axis=-1))
    return (finite_before - finite_after).astype(jnp.int32), moved


def apply(logits: jax.Array, history: History[jax.Array], produced: jax.Array, key: jax.Array | None,
          chain_: Chain, args: tuple[tuple[jax.Array, ...], ...], *, watch: jax.Array | None = None) -> Applied:
    """Every stage of `chain_` on logits (B, V), in order. `key` is the chain's own (folded per random stage).
    With `watch` (B, A) token ids (the model's top alternatives), it records what the sampling cut shows:
    which stage removed each watched token, and each stage's removed count and moved mass."""
    cands = Candidates(logits.astype(jnp.float32), None)
    batch, vocab = logits.shape
    cut = jnp.zeros((batch, 0 if watch is None else watch.shape[1]), jnp.int32)
    probs = jax.nn.softmax(cands.values, axis=-1) if watch is not None else cands.values
    removed: list[jax.Array] = []
    moved: list[jax.Array] = []
    carried: list[jax.Array] = []  # (B, 1) each carrying stage's state at this step
    observed: list[jax.Array] = []  # (B, V) what settles it
    for index, ((name, static), stage_args) in enumerate(zip(chain_.stages, args, strict=True)):
        stage = _stage(name)
        stage_key = jax.random.fold_in(key, index) if stage.random and key is not None else None
        carry = None
        if stage.needs.carry:
            carrying = cast(CarryingStage, stage)
            column = len(carried)
            start = jnp.broadcast_to(carrying.initial(stage_args), (batch, 1)).astype(jnp.float32)
            carry = jnp.where(produced == 0, start, history.carry[:, column:column + 1])  # (B, 1)
            carried.append(carry)
        after = stage.apply(cands, View(history, produced, stage_key, carry), static, stage_args)
        if carry is not None:
            observed.append(in_vocab(carrying.observed(cands, after), vocab, 0.0))
        if watch is not None:
            after_probs = jax.nn.softmax(after.values, axis=-1)
            count, mass = _record(cands, probs, after, after_probs)
            alive = jnp.isfinite(_at(after, after.values, watch, -jnp.inf))  # (B, A)
            cut = jnp.where((cut == 0) & ~alive, index + 1, cut)
            removed.append(count)
            moved.append(mass)
            probs = after_probs
        cands = after
    state = jnp.concatenate(carried, axis=-1) if carried else jnp.zeros((batch, 0), jnp.float32)
    if not removed:
        return Applied(cands, cut, jnp.zeros((batch, 0), jnp.int32), jnp.zeros((batch, 0), jnp.float32), state,
                       tuple(observed))
    return Applied(cands, cut, jnp.stack(removed, axis=-1), jnp.stack(moved, axis=-1), state, tuple(observed))


def settle(chain_: Chain, args: tuple[tuple[jax.Array, ...], ...], applied: Applied, token: jax.Array) -> jax.Array:
    """(B, C): the carrying stages' state after `token` (B,) was drawn from what `applied` gave."""
    columns: list[jax.Array] = []
    for (name, _), stage_args in zip(chain_.stages, args, strict=True):
        stage = _stage(name)
        if stage.needs.carry:
            column = len(columns)
            chosen = jnp.take_along_axis(applied.observed[column], token[:, None], axis=-1)  # (B, 1)
            columns.append(cast(CarryingStage, stage).settled(applied.carried[:, column:column + 1], chosen,
                                                              stage_args))
    return jnp.concatenate(columns, axis=-1) if columns else applied.carried


def preceded(applied: Applied, model_logits: jax.Array, logits: jax.Array, watch: jax.Array) -> Applied:
    """The chain's record with a strategy's own stage put first (DoLa's contrast): from the model's own logits
    (B, V) to the `logits` the chain started from, what it removed, the mass it moved, and which of the watched
    tokens (B, A) it took out."""
    before, after = Candidates(model_logits, None), Candidates(logits, None)
    count, mass = _record(before, jax.nn.softmax(model_logits, axis=-1), after, jax.nn.softmax(logits, axis=-1))
    alive = jnp.isfinite(jnp.take_along_axis(logits, watch, axis=-1))  # (B, A)
    cut = jnp.where(~alive, 1, jnp.where(applied.cut > 0, applied.cut + 1, 0))
    return applied._replace(cut=cut, removed=jnp.concatenate([count[:, None], applied.removed], axis=-1),
                            moved=jnp.concatenate([mass[:, None], applied.moved], axis=-1))


def for_row(chain_: Chain, args: tuple[tuple[jax.Array, ...], ...],
            index: jax.Array) -> tuple[tuple[jax.Array, ...], ...]:
    """The arguments as one row of a batch sees them: a per-row stage's arrays cut to their row `index` (a verify
    pass scores its positions one at a time, each with its own constraint mask)."""
    return tuple(tuple(jax.lax.dynamic_slice_in_dim(a, index, 1) for a in stage_args)
                 if _stage(name).per_row else stage_args
                 for (name, _), stage_args in zip(chain_.stages, args, strict=True))


def chosen_ids(cands: Candidates, picks: jax.Array) -> jax.Array:
    """Positions in the candidate set (B,) -> token ids (B,) int32."""
    if cands.ids is None:
        return picks.astype(jnp.int32)
    return jnp.take_along_axis(cands.ids, picks[:, None], axis=-1)[:, 0].astype(jnp.int32)

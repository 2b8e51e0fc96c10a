"""A constrained JAX run's host side: llguidance matchers that give the chain's constraint stage its mask rows.

The mask is a traced argument (stages.Constraint), so a new mask never recompiles; it reaches the device between
calls. Plain decoding and beam search therefore run one step per call while constrained. A verify pass scores
all its positions in one call, so each position gets the mask after the drafts before it, computed ahead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from playground.backends.jax.chain.chain import Chain, Context
from playground.backends.jax.chain.token_choice import ChainArgs
from playground.constraints.matching import Replay, allowed_tokens, replay, root_matcher, take
from playground.spec import RunSpec


def mask_stage(chain_: Chain) -> int:
    """The constraint's place among the chain's arguments (-1: the run is not constrained)."""
    names = chain_.names
    return names.index("constraint") if "constraint" in names else -1


def with_rows(args: ChainArgs, stage: int, rows: Sequence[np.ndarray]) -> ChainArgs:
    """The chain's host arguments with the constraint's mask replaced by `rows` (each (V,) bool), the last one
    repeated to the stage's height (rows past the real ones are never read)."""
    height = args[stage][0].shape[0]
    stacked = np.stack([*rows, *[rows[-1]] * (height - len(rows))][:height])  # (height, V)
    return (*args[:stage], (stacked,), *args[stage + 1:])


def draft_rows(matcher: Any, drafts: Sequence[int], vocab_size: int,
               ends: Sequence[int]) -> tuple[list[np.ndarray], int]:
    """A verify pass's masks: row i allows what may follow the text so far and drafts[:i]. Drafts after the first
    one the grammar forbids (or after an end the grammar took) are dropped: the verify pass rejects a forbidden
    draft by its row's mask, so nothing past it can be kept. Returns the rows and how many drafts stay."""
    rows = [allowed_tokens(matcher, vocab_size)]
    fork = matcher.deep_copy()
    for count, token in enumerate(drafts, start=1):
        if not rows[-1][token] or not take(fork, token):
            return rows, count
        rows.append(allowed_tokens(fork, vocab_size))  # a finished grammar allows only the end tokens
        if token in ends:
            return rows, count
    return rows, len(drafts)


def follow_beams(matchers: list[Any], rows: list[np.ndarray], parents: Sequence[int], tokens: Sequence[int],
                 vocab_size: int) -> tuple[list[Any], list[np.ndarray]]:
    """Beam search's matchers after one step: beam i continues beam parents[i] with tokens[i]. A token its
    parent's mask forbade (a beam the search keeps at -inf when fewer candidates than beams are allowed) leaves
    that beam at its parent's state: its score can never win."""
    new_matchers, new_rows = [], []
    for parent, token in zip(parents, tokens, strict=True):
        child = matchers[parent].deep_copy()
        if rows[parent][token] and take(child, token):
            new_matchers.append(child)
            new_rows.append(allowed_tokens(child, vocab_size))
        else:
            new_matchers.append(matchers[parent])
            new_rows.append(rows[parent])
    return new_matchers, new_rows


class RowMatchers:
    """A constrained beam search's host side (beam search, diverse beam search): one matcher per row of the batch,
    each row's following its parent row's every step, and the rows of the mask they send."""

    def __init__(self, spec: RunSpec, context: Context, stage: int) -> None:
        self.spec, self.context, self.stage = spec, context, stage
        root = root_matcher(context.tokenizer, context.vocab_size, context.eos, spec.constraint, spec.constraint_text,
                            spec.prefix_ids)
        self.matchers: list[Any] = [root] * context.rows
        self.masks: list[np.ndarray] = [allowed_tokens(root, context.vocab_size)] * context.rows

    def args(self, args: ChainArgs) -> ChainArgs:
        """The chain's host arguments with these rows' masks."""
        return with_rows(args, self.stage, self.masks)

    def follow(self, parents: Sequence[int], tokens: Sequence[int], live: Sequence[int] | None = None) -> None:
        """After a step: row r continues row parents[r] with tokens[r], for each row in `live` (default: all); a row
        not live (a finished group's, running on padding) takes its parent's state as it is."""
        live = range(len(parents)) if live is None else live
        matchers, masks = [self.matchers[p] for p in parents], [self.masks[p] for p in parents]
        followed, rows = follow_beams(self.matchers, self.masks, [parents[r] for r in live],
                                      [tokens[r] for r in live], self.context.vocab_size)
        for r, matcher, mask in zip(live, followed, rows, strict=True):
            matchers[r], masks[r] = matcher, mask
        self.matchers, self.masks = matchers, masks

    def replay(self, sequences: list[list[int]]) -> list[Replay]:
        """The verdict's engine side for each returned sequence, replayed from the root: finished hypotheses keep
        no matcher."""
        context, spec = self.context, self.spec
        return [replay(context.tokenizer, context.vocab_size, context.eos, spec.constraint, spec.constraint_text,
                       spec.prefix_ids, ids) for ids in sequences]

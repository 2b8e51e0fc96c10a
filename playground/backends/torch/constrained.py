"""The constraint stage of the logits chain on PyTorch: llguidance's mask of the tokens that can continue a match,
as a LogitsProcessor that every strategy's loop calls.

One matcher per distinct generated prefix, made from its parent's by one token: beam search's rows, assisted
decoding's verify positions and contrastive search's steps each find the state of their own text, so a beam's
matcher follows its beam through any reordering and a rejected draft simply leaves its prefix unused (nothing to
roll back). A row whose last token the grammar forbade (a draft the verify pass will reject) is left unmasked: its
scores are never used (should such a row be returned, the verdict says from which token the constraint was not
enforced). A token the grammar allows but the engine cannot take, one of its limits, stops the run with the
reason (constraints.matching.take). The matchers of prefixes no current row extends are dropped as the text grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessor

from playground.backends.torch.chain import TorchContext
from playground.constraints.matching import allowed_tokens, root_matcher, take
from playground.spec import RunSpec

# how far behind the current rows a prefix's matcher is kept: a verify pass resumes from an accepted prefix at most
# this many tokens back (prompt lookup drafts 64 at most); further back it is replayed from the root
KEEP_BEHIND = 64


class ConstraintMask(LogitsProcessor):
    """Sets to -inf the scores of every token the constraint's grammar cannot take next, row by row."""

    def __init__(self, spec: RunSpec, context: TorchContext) -> None:
        self.kind, self.text = spec.constraint, spec.constraint_text
        self.prefix_ids = tuple(spec.prefix_ids)
        self.context = context
        self.matchers: dict[tuple[int, ...], Any] = {}

    def _root(self, vocab_size: int) -> Any:
        return root_matcher(self.context.tokenizer, vocab_size, self.context.eos, self.kind, self.text,
                            self.prefix_ids)

    def matcher(self, generated: tuple[int, ...], vocab_size: int) -> Any | None:
        """The matcher after `generated`; None where the grammar refused one of its tokens."""
        if not self.matchers:
            self.matchers[()] = self._root(vocab_size)
        known = len(generated)
        while generated[:known] not in self.matchers:  # the root, () , is always there
            known -= 1
        for end in range(known + 1, len(generated) + 1):
            parent = self.matchers[generated[:end - 1]]
            if parent is None or parent.is_stopped():
                child = None
            else:
                child = parent.deep_copy()
                if not take(child, generated[end - 1]):
                    child = None
            self.matchers[generated[:end]] = child
        return self.matchers[generated]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        vocab_size = scores.shape[-1]
        rows = [tuple(row) for row in input_ids[:, self.context.prompt_length:].tolist()]
        allowed = np.ones((len(rows), vocab_size), dtype=bool)
        for i, generated in enumerate(rows):
            found = self.matcher(generated, vocab_size)
            if found is not None:
                allowed[i] = allowed_tokens(found, vocab_size)
        self._forget(rows)
        mask = torch.from_numpy(~allowed).to(scores.device)
        return scores.masked_fill(mask, -float("inf"))  # type: ignore[return-value]

    def _forget(self, rows: Sequence[tuple[int, ...]]) -> None:
        """Drop the matchers of prefixes no current row extends (a pruned beam, a rejected draft) and those more
        than KEEP_BEHIND tokens behind every row; the root stays, so any prefix can still be replayed from it."""
        shortest = min((len(row) for row in rows), default=0)
        for prefix in list(self.matchers):
            if prefix and (len(prefix) < shortest - KEEP_BEHIND
                           or not any(row[:len(prefix)] == prefix for row in rows)):
                del self.matchers[prefix]


def constraint_mask(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    """The registry's torch side of the `constraint` stage."""
    return ConstraintMask(spec, context)

"""llguidance's matchers over a model's vocabulary, for either backend: the index of a tokenizer, a constraint's
next-token mask as booleans, and whether the grammar may end after some tokens (NumPy only, no torch or jax)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from playground.constraints import grammar
from playground.errors import PlaygroundError


@lru_cache(maxsize=4)
def token_index(tokenizer: Any, vocab_size: int, eos: tuple[int, ...]) -> Any:
    """llguidance's index of a tokenizer's vocabulary, for logits of `vocab_size` and these end tokens (about a
    second to build, so kept for the loaded tokenizers)."""
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=list(eos) or None)


def root_matcher(tokenizer: Any, vocab_size: int, eos: tuple[int, ...], kind: str, text: str,
                 prefix_ids: Sequence[int]) -> Any:
    """A fresh matcher for the constraint, past a branch's forced tokens (the start of the constrained text)."""
    root = grammar.matcher(token_index(tokenizer, vocab_size, eos), kind, text)
    for token in prefix_ids:
        if not root.consume_token(token):
            raise PlaygroundError(f"the forced prefix leaves the constraint: token {token} cannot continue it")
    return root


def allowed_tokens(matcher: Any, vocab_size: int) -> np.ndarray:
    """The matcher's next-token bitmask as booleans over the vocabulary."""
    import llguidance.numpy

    bits = llguidance.numpy.allocate_token_bitmask(1, vocab_size)
    llguidance.numpy.fill_next_token_bitmask(matcher, bits, 0)
    return np.unpackbits(bits.view(np.uint8), bitorder="little")[:vocab_size].astype(bool)


def accepting(tokenizer: Any, vocab_size: int, eos: tuple[int, ...], kind: str, text: str,
              prefix_ids: Sequence[int], ids: Sequence[int]) -> bool:
    """Whether the grammar may end after `ids` (the generated tokens, a final end token left out): the engine's
    side of the verdict (playground.constraints.verdict)."""
    found = root_matcher(tokenizer, vocab_size, eos, kind, text, prefix_ids)
    body = list(ids)
    if body and body[-1] in eos:
        body = body[:-1]
    return all(found.consume_token(token) for token in body) and bool(found.is_accepting())

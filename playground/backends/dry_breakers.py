"""DRY's sequence breakers as token ids: a repeat never runs across a token whose text contains a breaker. Both
backends' DRY stages read the same ids (the PyTorch processor as a set, the JAX stage as a mask row)."""

from __future__ import annotations

import weakref
from typing import Any

# each tokenizer's vocabulary decoded one token at a time: 49k decodes take seconds, and the vocabulary only
# changes when tokens are added (then its length changes and it is decoded again)
_DECODED: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()


def _decoded_vocabulary(tokenizer: Any) -> tuple[str, ...]:
    """Every token id's text as decode([id]) gives it (the token's text, not convert_ids_to_tokens' spelling)."""
    size = len(tokenizer)
    texts = _DECODED.get(tokenizer)
    if texts is None or len(texts) != size:
        texts = tuple(tokenizer.decode([token]) for token in range(size))
        _DECODED[tokenizer] = texts
    return texts


def breaker_ids(tokenizer: Any, breakers: tuple[str, ...]) -> frozenset[int]:
    """The ids of every token whose text contains one of `breakers`: a DRY match never runs across them."""
    if not breakers:
        return frozenset()
    return frozenset(token for token, text in enumerate(_decoded_vocabulary(tokenizer))
                     if any(breaker in text for breaker in breakers))

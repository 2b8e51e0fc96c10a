"""llguidance's matchers over a model's vocabulary, for either backend: the index of a tokenizer, a constraint's
next-token mask as booleans, a token taken (a limit the engine meets stops the run), and the engine's side of the
verdict: whether the grammar may end after some tokens, or where it refused one (NumPy only, no torch or jax)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from playground.constraints import engine_limits, grammar
from playground.errors import PlaygroundError


class Replay(NamedTuple):
    """The engine's side of the verdict: its matcher fed an output's tokens from the root."""

    accepting: bool  # the grammar may end after the tokens
    refused_at: int | None  # the first token (from 1) the grammar refused, so not enforced from there; None: none


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
        if not take(root, token):
            raise PlaygroundError(f"the forced prefix leaves the constraint: token {token} cannot continue it")
    return root


def take(matcher: Any, token: int) -> bool:
    """The matcher takes `token`; False (the matcher unchanged) where the grammar refuses it. Where the engine
    fails on a token the grammar allows, it has met one of its limits: a PlaygroundError that says which, since
    a failed matcher allows only the end of text (the constraint would quietly end or leave the text)."""
    if not matcher.validate_tokens([token]):
        if matcher.is_error() and engine_limits.is_limit(matcher.get_error()):
            raise engine_limits.failed(matcher.get_error())
        return False
    if not matcher.consume_token(token):
        raise engine_limits.failed(matcher.get_error())
    return True


def allowed_tokens(matcher: Any, vocab_size: int) -> np.ndarray:
    """The matcher's next-token bitmask as booleans over the vocabulary (a PlaygroundError where the engine met
    one of its limits computing it)."""
    import llguidance.numpy

    bits = llguidance.numpy.allocate_token_bitmask(1, vocab_size)
    llguidance.numpy.fill_next_token_bitmask(matcher, bits, 0)
    if matcher.is_error():
        raise engine_limits.failed(matcher.get_error())
    return np.unpackbits(bits.view(np.uint8), bitorder="little")[:vocab_size].astype(bool)


def replay(tokenizer: Any, vocab_size: int, eos: tuple[int, ...], kind: str, text: str,
           prefix_ids: Sequence[int], ids: Sequence[int]) -> Replay:
    """The engine's side of the verdict (playground.constraints.verdict) for the generated tokens `ids` (a final
    end token left out): whether the grammar may end after them, and the first one it refused, if any."""
    found = root_matcher(tokenizer, vocab_size, eos, kind, text, prefix_ids)
    body = list(ids)
    if body and body[-1] in eos:
        body = body[:-1]
    for position, token in enumerate(body, start=1):
        if not take(found, token):
            return Replay(accepting=False, refused_at=position)
    return Replay(accepting=bool(found.is_accepting()), refused_at=None)

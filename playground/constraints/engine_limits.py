"""The grammar engine's limits: a constraint past one is refused before anything loads, in words a person reads
(what is too large, and the limit), and a matcher that meets one during a run stops the run with the same words.

llguidance builds its lexer lazily, so `validate_grammar` lets through grammars that fail later. A grammar with
more symbols than the engine can number panics when its matcher is built (400 object definitions of 40 fields, a
460 KB schema). A regex whose repeats need more lexer work per token than the engine allows (`a{1000000}`) leaves
the matcher in an error state at the first token, and a matcher in that state allows only the end of text.
`probe` builds a matcher over a byte vocabulary and walks the first bytes of the text, taking every allowed byte
one step ahead, so that both are refused before the run.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from playground.errors import PlaygroundError

# llguidance's own limits (its LLParserLimits defaults), passed explicitly so that a refusal quotes the ones in force
LEXER_FUEL_PER_STEP = 200_000  # step_lexer_fuel: the lexer's work per mask (about 14 units a microsecond)
LEXER_STATES = 250_000  # max_lexer_states: the lexer's states in all (1-2 kB each)
GRAMMAR_SIZE = 500_000  # max_grammar_size: the symbols of the grammar's productions
# llguidance numbers a grammar's symbols with 16 bits and asserts `symbols < u16::MAX - 10`: a panic, not a message
MAX_SYMBOLS = 65_535 - 10
JSON_NESTING = 128  # serde_json's recursion limit, which llguidance's schema reader keeps
PROBE_STEPS = 4  # bytes the probe walks into the text (each allowed byte is also taken one step ahead)
# the probe's budget of bytes taken ahead: each mask is capped by the lexer's fuel (about 15 ms), but a step may try
# all 256 bytes ahead, so without a cap a hostile grammar could hold the page's card (which probes on every edit) for
# seconds. Counted in masks, not seconds, so that what is refused does not depend on the machine's load. Past it the
# probe stops walking; a limit met later still stops the run with the reason (`failed`)
PROBE_AHEAD = 32
REFUSED = "Parser Error:"  # how llguidance's error for a token the grammar does not allow begins
_BYTES = 256  # the probe vocabulary: one token per byte, then the end of text


def parser_limits() -> Any:
    """llguidance's limits for every matcher and validation here."""
    from llguidance import LLParserLimits

    return LLParserLimits(step_lexer_fuel=LEXER_FUEL_PER_STEP, max_lexer_states=LEXER_STATES,
                          max_grammar_size=GRAMMAR_SIZE)


class _ByteVocabulary:
    """What llguidance's TokenizerWrapper reads: 256 byte tokens and an end of text, no model needed."""

    eos_token_id = _BYTES
    bos_token_id = None
    tokens = [bytes([b]) for b in range(_BYTES)] + [b"<eos>"]
    special_token_ids = [_BYTES]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


@lru_cache(maxsize=1)
def byte_vocabulary() -> Any:
    from llguidance import LLTokenizer, TokenizerWrapper

    return LLTokenizer(TokenizerWrapper(_ByteVocabulary()))


# the engine's error at each limit (a fragment of its message) -> what is too large, the limit, and what to do
_LIMITS = {
    "symbols.len() < u16::MAX": f"its grammar needs more than {MAX_SYMBOLS:,} symbols (the engine's limit); use "
                                "fewer properties, definitions or alternatives",
    "too many expressions constructed": f"matching it needs more than {LEXER_FUEL_PER_STEP:,} units of lexer work "
                                        "for one token (the engine's limit); use smaller repeat counts: "
                                        "a{1000000} is past it",
    "too many states": f"matching it needs more than {LEXER_STATES:,} lexer states (the engine's limit); use "
                       "smaller repeat counts or fewer alternatives",
    "recursion limit exceeded": f"it nests deeper than {JSON_NESTING} levels (the JSON reader's limit)",
    "schema too large": "the schema has more parts than the engine takes; use fewer properties or definitions",
}


def is_limit(error: str) -> bool:
    """Whether the engine's error is one of its limits, rather than a mistake in the grammar."""
    return any(fragment in error for fragment in _LIMITS) or error.startswith("panic:")


def readable(error: str) -> str:
    """The engine's error as what is too large and the limit (its own first line where no limit is known)."""
    for fragment, words in _LIMITS.items():
        if fragment in error:
            return words
    first = error.strip().splitlines()[0] if error.strip() else "no reason given"
    return f"the engine stopped: {first[:300]}"


def too_large(error: str) -> PlaygroundError:
    """A limit found before the run."""
    return PlaygroundError(f"constraint_text is too large for the grammar engine (llguidance): {readable(error)}")


def failed(error: str) -> PlaygroundError:
    """A limit met during a run, past what the probe walks: the run stops, with the reason."""
    return PlaygroundError(f"constraint_text met a limit of the grammar engine (llguidance) during the run: "
                           f"{readable(error)}")


def probe(compiled: str, ahead_budget: int = PROBE_AHEAD) -> None:
    """Refuse a grammar that compiles but cannot be matched within the engine's limits (see the module's note),
    taking at most `ahead_budget` bytes ahead in all."""
    from llguidance import LLMatcher

    matcher = LLMatcher(byte_vocabulary(), compiled, log_level=0, limits=parser_limits())
    for _ in range(PROBE_STEPS):
        allowed = _allowed_bytes(matcher)
        for byte in allowed:  # the engine fails on an allowed byte only at one of its limits
            if ahead_budget <= 0:
                return
            ahead_budget -= 1
            ahead = matcher.deep_copy()
            ahead.consume_token(byte)
            _allowed_bytes(ahead)
        if not allowed:
            return
        matcher.consume_token(allowed[0])


def _allowed_bytes(matcher: Any) -> list[int]:
    """The bytes the matcher allows next (the end of text left out); a refusal where the engine failed."""
    import llguidance.numpy

    _refuse_if_failed(matcher)
    bits = llguidance.numpy.allocate_token_bitmask(1, _BYTES + 1)
    llguidance.numpy.fill_next_token_bitmask(matcher, bits, 0)
    _refuse_if_failed(matcher)
    allowed = np.unpackbits(bits.view(np.uint8), bitorder="little")[:_BYTES]
    return [int(b) for b in np.flatnonzero(allowed)]


def _refuse_if_failed(matcher: Any) -> None:
    """Refuse where the engine met a limit; a byte its parser turned down is not one."""
    if matcher.is_error() and not matcher.get_error().startswith(REFUSED):
        raise too_large(matcher.get_error())

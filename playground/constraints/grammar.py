"""A constraint as llguidance grammar: built from the `constraint` and `constraint_text` knobs, and refused before
anything loads when the engine cannot read it, in one line naming the field.

llguidance (MIT) compiles regexes, JSON schemas and Lark grammars; a list of choices becomes a Lark grammar of
quoted alternatives. Why llguidance and not xgrammar: docs/benchmarks.md (grammar engines).
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from playground.constraints import engine_limits
from playground.errors import PlaygroundError
from playground.limits import is_public
from playground.registry import chain
from playground.registry.builtin_knobs import CONSTRAINT_KINDS
from playground.registry.entries import RunSpec

# what each kind's text is, for messages and the page
TEXT_NAMES = {"regex": "regular expression", "json_schema": "JSON schema", "choice": "list of choices",
              "grammar": "Lark grammar"}
MAX_CHOICES = 1000
# public deployments: how big a constraint may be, and how long its grammar may take to compile
PUBLIC_GRAMMAR_CHARS, PUBLIC_COMPILE_S = 20_000, 2.0
LOCAL_GRAMMAR_CHARS = 1_000_000


def max_grammar_chars() -> int:
    default = PUBLIC_GRAMMAR_CHARS if is_public() else LOCAL_GRAMMAR_CHARS
    return int(os.environ.get("PLAYGROUND_MAX_GRAMMAR_CHARS", default))


def max_compile_s() -> float | None:
    """How long building a matcher may take (public deployments only; None: no limit)."""
    value = os.environ.get("PLAYGROUND_MAX_GRAMMAR_COMPILE_S")
    if value is not None:
        return float(value)
    return PUBLIC_COMPILE_S if is_public() else None


def choices(text: str) -> list[str]:
    """The choices of a list: one per line, or `|`-separated on one line; blank entries dropped, order kept."""
    parts = text.splitlines() if "\n" in text.strip() else text.split("|")
    return list(dict.fromkeys(part.strip() for part in parts if part.strip()))


def grammar(kind: str, text: str) -> str:
    """llguidance's grammar for a constraint (a JSON string its matcher takes)."""
    from llguidance import LLMatcher

    if kind == "regex":
        return str(LLMatcher.grammar_from_regex(text))
    if kind == "json_schema":
        return str(LLMatcher.grammar_from_json_schema(_schema(text)))
    if kind == "choice":
        return str(LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in _choices(text))))
    if kind == "grammar":
        return str(LLMatcher.grammar_from_lark(text))
    raise PlaygroundError(f"constraint={kind!r} is not one of {', '.join(CONSTRAINT_KINDS)}")


def check(kind: str, text: str) -> None:
    """Refuse a constraint the engine cannot read (or too big for this deployment), before anything loads: one
    line naming the field and the engine's reason."""
    if kind == "none":
        if text.strip():
            raise PlaygroundError("constraint_text is set but constraint is 'none': pick regex, json_schema, choice "
                                  "or grammar, or clear the text")
        return
    if not text.strip():
        raise PlaygroundError(f"constraint={kind!r} needs its {TEXT_NAMES.get(kind, 'text')} in constraint_text")
    if len(text) > max_grammar_chars():
        raise PlaygroundError(f"constraint_text has {len(text):,} characters; this deployment allows "
                              f"{max_grammar_chars():,} (PLAYGROUND_MAX_GRAMMAR_CHARS)")
    from llguidance import LLMatcher

    compiled = grammar(kind, text)
    error = LLMatcher.validate_grammar(compiled, limits=engine_limits.parser_limits())
    if error:
        if engine_limits.is_limit(error):
            raise engine_limits.too_large(error)
        raise PlaygroundError(f"constraint_text is not a valid {TEXT_NAMES[kind]}: {one_line(error)}")
    engine_limits.probe(compiled)


def check_run(spec: RunSpec) -> None:
    """A run's constraint (the constraint stage's check, which RunSpec runs): its text must compile (llguidance's
    message otherwise), and no other setting may contradict it."""
    check(spec.constraint, spec.constraint_text)
    if spec.constraint == "none":
        return
    if spec.min_new_tokens:
        raise PlaygroundError(f"min_new_tokens={spec.min_new_tokens} would forbid the end a constraint may need; "
                              "with a constraint the grammar decides where the text ends: set min_new_tokens to 0")
    if spec.no_repeat_ngram_size:
        raise PlaygroundError(f"no_repeat_ngram_size={spec.no_repeat_ngram_size} can ban every token a constraint "
                              "allows (JSON repeats its punctuation): set it to 0 with a constraint")
    if "constraint" in chain.parse_order(spec.sampler_order):
        raise PlaygroundError("sampler_order cannot move the constraint: its mask always comes first")


def matcher(tokenizer: Any, kind: str, text: str) -> Any:
    """A fresh llguidance matcher for this constraint over `tokenizer` (llguidance's index of the vocabulary);
    refused when the tokenizer cannot express it or, in public, when compiling takes too long."""
    from llguidance import LLMatcher

    start = time.perf_counter()
    found = LLMatcher(tokenizer, grammar(kind, text), log_level=0, limits=engine_limits.parser_limits())
    took, limit = time.perf_counter() - start, max_compile_s()
    if found.is_error() and engine_limits.is_limit(found.get_error()):
        raise engine_limits.too_large(found.get_error())
    if found.is_error():
        raise PlaygroundError(f"constraint_text cannot be matched with this model's tokenizer: "
                              f"{one_line(found.get_error())}")
    if limit is not None and took > limit:
        raise PlaygroundError(f"constraint_text took {took:.1f} s to compile; this deployment allows {limit:g} s "
                              "(PLAYGROUND_MAX_GRAMMAR_COMPILE_S): simplify the grammar")
    return found


def one_line(message: str) -> str:
    """The engine's message on one line, without its source excerpt ("1 | ...") and caret lines."""
    kept = [line.strip() for line in message.splitlines()
            if line.strip() and not set(line.strip()) <= {"^", " "} and not re.match(r"^\d+ \|", line.strip())]
    return " ".join(kept)[:400]


def _schema(text: str) -> str:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlaygroundError(f"constraint_text is not valid JSON for a JSON schema: {exc}") from None
    if not isinstance(value, dict):
        raise PlaygroundError("constraint_text must be a JSON object (a JSON schema), e.g. {\"type\": \"object\"}")
    return json.dumps(value)


def _choices(text: str) -> list[str]:
    found = choices(text)
    if not found:
        raise PlaygroundError("constraint_text holds no choice: write one per line, or separate them with |")
    if len(found) > MAX_CHOICES:
        raise PlaygroundError(f"constraint_text holds {len(found)} choices; at most {MAX_CHOICES}")
    return found

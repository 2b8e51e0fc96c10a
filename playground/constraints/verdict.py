"""Whether a constrained run's output is what the constraint asked for, judged apart from the engine that enforced
it: `re.fullmatch` for a regex, `json.loads` plus the `jsonschema` package for a schema, membership for a choice,
the `lark` package's parser for a grammar (where lark reads llguidance's Lark; else the engine's own parser).

A run that hit max_new_tokens before the grammar could end is "incomplete", never presented as valid; an output
the grammar refused a token of can no longer match, and is "invalid: the constraint was not enforced from token N".
"""

from __future__ import annotations

import json
import re
from typing import TypedDict

from playground.constraints.grammar import TEXT_NAMES, choices

INCOMPLETE = "incomplete: the grammar needed more tokens"


class Verdict(TypedDict):
    """What the result and the card say about a constrained output."""

    kind: str  # the constraint: regex, json_schema, choice or grammar
    valid: bool  # the output matches the constraint, checked independently of the engine
    verdict: str  # "valid", INCOMPLETE, or "invalid: <why>"
    checked_by: str  # what judged it


def judge(kind: str, text: str, output: str, accepting: bool, refused_at: int | None = None) -> Verdict:
    """The verdict on `output` (the generated text, special tokens left out). The engine's matcher, fed the
    output's tokens: `accepting`, it is in a state where the grammar may end; `refused_at`, the first token (from
    1) it refused, where the mask was not applied (None: it took every token, so the text is still a prefix of a
    match, and only a text that is not yet one is incomplete)."""
    valid, why, checked_by = _check(kind, text, output, accepting and refused_at is None)
    if valid:
        return {"kind": kind, "valid": True, "verdict": "valid", "checked_by": checked_by}
    if refused_at is not None:
        verdict = f"invalid: the constraint was not enforced from token {refused_at} ({why})"
    else:
        verdict = f"invalid: {why}" if accepting else INCOMPLETE
    return {"kind": kind, "valid": False, "verdict": verdict, "checked_by": checked_by}


def _check(kind: str, text: str, output: str, accepting: bool) -> tuple[bool, str, str]:
    if kind == "regex":
        return re.fullmatch(text, output) is not None, "the regex does not match the whole output", "re.fullmatch"
    if kind == "choice":
        return output in choices(text), "the output is not one of the choices", "the list of choices"
    if kind == "json_schema":
        return _json(text, output)
    if kind == "grammar":
        return _lark(text, output, accepting)
    raise ValueError(f"no check for constraint {kind!r} ({', '.join(TEXT_NAMES)})")


def _json(schema: str, output: str) -> tuple[bool, str, str]:
    import jsonschema

    checked_by = "json.loads + jsonschema"
    try:
        value = json.loads(output)
    except json.JSONDecodeError as exc:
        return False, f"not JSON ({exc})", checked_by
    try:
        jsonschema.validate(value, json.loads(schema))
    except jsonschema.ValidationError as exc:
        return False, f"the schema refuses it: {exc.message}", checked_by
    return True, "", checked_by


def _lark(grammar: str, output: str, accepting: bool) -> tuple[bool, str, str]:
    """The lark package's Earley parser over the grammar; llguidance's Lark has extensions lark cannot read
    (%json, lexeme options), and such a grammar is judged by the engine's own parser state instead."""
    import lark

    try:
        parser = lark.Lark(grammar, start="start", parser="earley")
    except lark.exceptions.LarkError:
        return accepting, "llguidance's parser does not accept it", "llguidance's parser (lark cannot read it)"
    try:
        parser.parse(output)
    except lark.exceptions.LarkError as exc:
        return False, f"the grammar's parser refuses it: {str(exc).splitlines()[0]}", "lark"
    return True, "", "lark"

"""Constraints near the grammar engine's limits: large repeat counts, long alternations, deep nesting and large
schemas are enforced at every step below the limits, and refused before anything loads past them, in one line
that says what is too large and the limit (never the engine's panic); a limit met during a run stops the run with
the same words rather than leaving tokens unmasked; an output the grammar refused a token of is never called
incomplete."""

from __future__ import annotations

import json

import pytest
import torch

from playground.constraints import engine_limits
from playground.constraints.matching import Replay, replay
from playground.constraints.record import constraint_record
from playground.constraints.verdict import INCOMPLETE, judge
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from playground.ui import columns
from tests.helpers import tiny_llama, tiny_loaded, torch_run

EOS = 256
PROMPT = torch.tensor([[72, 101, 108, 108, 111]])


@pytest.fixture(scope="module")
def tiny():
    return tiny_loaded("tiny-limits", tiny_llama(seed=5))


def _nested_schema(depth: int) -> str:
    node: dict = {"type": "integer"}
    for _ in range(depth):
        node = {"type": "object", "properties": {"child": node}, "required": ["child"]}
    return json.dumps(node)


def _chained_definitions(count: int, fields: int) -> str:
    """`count` object definitions of `fields` string properties, each holding the next: a large, flat schema."""
    definitions = {}
    for k in range(count):
        properties: dict = {f"f{i}": {"type": "string"} for i in range(fields)}
        if k + 1 < count:
            properties["next"] = {"$ref": f"#/$defs/d{k + 1}"}
        definitions[f"d{k}"] = {"type": "object", "properties": properties}
    return json.dumps({"$defs": definitions, "$ref": "#/$defs/d0"})


def _spec(kind: str, text: str, **knobs) -> RunSpec:
    return RunSpec.from_dict({"constraint": kind, "constraint_text": text, "max_new_tokens": 8, **knobs})


# below the limits: each compiles, and the mask holds at every step (a{100000}: the test after)
NEAR = {
    "a huge repeat of a class": ("regex", "[a-z]{1000000}"),
    "a long alternation": ("regex", "|".join(f"word{i}" for i in range(5_000))),
    "deeply nested groups": ("regex", "(" * 200 + "a" + ")" * 200),
    "a thousand choices": ("choice", "\n".join(f"option {i}" for i in range(1000))),
    "a schema nested 40 deep": ("json_schema", _nested_schema(40)),
    "a large schema (200 definitions)": ("json_schema", _chained_definitions(200, 10)),
}
# past them: refused before anything loads, naming what is too large and the limit
PAST = {
    "a repeat past the lexer's work per token": ("regex", "a{1000000}", "200,000 units of lexer work"),
    "a repeat reached through a choice": ("regex", "x(a|b)*y{1000000}", "200,000 units of lexer work"),
    "nested repeats": ("regex", "(a{1000}){1000}", "200,000 units of lexer work"),
    "a schema's pattern": ("json_schema", json.dumps({"type": "string", "pattern": "^a{1000000}$"}),
                           "200,000 units of lexer work"),
    "a schema nested past the JSON reader": ("json_schema", _nested_schema(200), "deeper than 128 levels"),
    "a schema past the engine's symbols (400 definitions)": ("json_schema", _chained_definitions(400, 40),
                                                             "more than 65,525 symbols"),
}


@pytest.mark.parametrize("name", list(NEAR))
def test_constraints_near_the_limits_are_enforced_at_every_step(tiny, name):
    kind, text = NEAR[name]
    spec = _spec(kind, text)
    out, _ = torch_run(tiny, PROMPT, spec)
    steps = [dict((stage, removed) for stage, removed, _ in info["stages"]) for info in out.token_info]
    assert all(step["constraint"] > 0 for step in steps)  # the mask took tokens out at every step
    record = constraint_record(spec, tiny.tokenizer, out)
    assert record is not None and (record["valid"] or record["verdict"] == INCOMPLETE), record["verdict"]


def test_a_long_repeat_keeps_its_mask_after_the_first_token(tiny):
    """The report's case one step below the limit: every token is the repeated letter, and the output, cut short
    by max_new_tokens, is incomplete (a prefix of the match), not a text that can no longer match."""
    spec = _spec("regex", "a{100000}")
    out, _ = torch_run(tiny, PROMPT, spec)
    assert out.sequences[0] == tiny.tokenizer.encode("a") * 8
    assert all(dict((s, r) for s, r, _ in info["stages"])["constraint"] == 256 for info in out.token_info)
    assert constraint_record(spec, tiny.tokenizer, out)["verdict"] == INCOMPLETE


@pytest.mark.parametrize("name", list(PAST))
def test_constraints_past_the_limits_are_refused_before_the_run_in_words(name):
    kind, text, limit = PAST[name]
    with pytest.raises(PlaygroundError) as refused:
        _spec(kind, text)
    message = str(refused.value)
    assert message.startswith("constraint_text is too large for the grammar engine (llguidance): ")
    assert limit in message and "panic" not in message and "\n" not in message


def test_the_card_shows_the_refusal_as_soon_as_the_text_is_set():
    values = {**columns.control_values({}), "constraint": "regex", "constraint_text": "a{1000000}"}
    notice = columns.notice_text(columns.column_settings(values))
    assert notice.startswith("⚠ constraint_text is too large for the grammar engine") and "a{1000000}" in notice


def test_a_limit_met_during_the_run_stops_it_with_the_reason(tiny):
    """Past the bytes the check walks ahead, the engine fails only when the run reaches the long repeat: the run
    stops with the same words, where a failed matcher would have let only the end of text through."""
    spec = _spec("regex", "(a|b){6}y{1000000}")  # compiles, and the check's walk stops before the y
    with pytest.raises(PlaygroundError, match="met a limit of the grammar engine .* 200,000 units of lexer work"):
        torch_run(tiny, PROMPT, spec)


def test_an_output_the_grammar_refused_a_token_of_is_invalid_from_that_token(tiny):
    """A refused token (a row the mask did not cover) means the text can no longer match: never "incomplete"."""
    digits = tiny.tokenizer.encode("1x2")
    assert replay(tiny.tokenizer, 257, (EOS,), "regex", "[0-9]{1,5}", (), digits) == Replay(False, 2)
    assert replay(tiny.tokenizer, 257, (EOS,), "regex", "[0-9]{1,5}", (), digits[:1] + [EOS]) == Replay(True, None)
    verdict = judge("regex", "[0-9]{1,5}", "1x2", accepting=False, refused_at=2)
    assert verdict["verdict"] == ("invalid: the constraint was not enforced from token 2 (the regex does not match "
                                  "the whole output)")
    assert judge("regex", "[0-9]{3}", "12", accepting=False)["verdict"] == INCOMPLETE


def test_the_limits_quoted_are_the_ones_the_engine_runs_with():
    limits = engine_limits.parser_limits()
    assert (limits.step_lexer_fuel, limits.max_lexer_states, limits.max_grammar_size) == (
        engine_limits.LEXER_FUEL_PER_STEP, engine_limits.LEXER_STATES, engine_limits.GRAMMAR_SIZE)


def test_the_probe_walks_for_its_budget_only():
    """The probe is bounded (the page's card runs it on every edit): past its budget of bytes taken ahead it stops
    walking and leaves a limit further on to the run, which stops with the reason (above)."""
    from playground.constraints.grammar import grammar

    compiled = grammar("regex", "ay{1000000}")  # the limit is one byte ahead of the first mask
    with pytest.raises(PlaygroundError, match="200,000 units of lexer work"):
        engine_limits.probe(compiled)
    engine_limits.probe(compiled, ahead_budget=0)  # no byte taken ahead: nothing refused here

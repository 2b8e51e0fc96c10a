"""Constraints on the bundled SmolLM2: a JSON schema, a regex and a choice list give valid outputs (greedy, JAX
beam search and sampling; every strategy on tiny models: tests/unit/test_constraints.py), constrained greedy is the
same on both backends and under JAX's assisted decoding, a constraint that allows any text leaves greedy's
tokens as they were, and a long repeat stays masked below the grammar engine's limit and is refused past it."""

import json

import pytest

from playground import runner
from playground.errors import PlaygroundError
from playground.spec import RunSpec

pytestmark = pytest.mark.slow

PROMPT = "Describe a fictional person as JSON with the fields name, age and city."
SCHEMA = json.dumps({"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                                      "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                                      "city": {"type": "string", "maxLength": 30}},
                     "required": ["name", "age", "city"], "additionalProperties": False})


@pytest.mark.parametrize(("constraint", "text", "knobs"), [
    ("json_schema", SCHEMA, {}),
    ("regex", r'\{"name": "[A-Z][a-z]+", "age": [1-9][0-9]?\}',
     {"strategy": "beam", "num_beams": 3, "num_return_sequences": 3, "backend": "jax"}),
    ("choice", "Paris\nLondon\nRome", {"strategy": "sampling", "temperature": 1.0, "seed": 4}),
])
def test_bundled_smollm2_gives_valid_constrained_outputs(constraint, text, knobs):
    spec = RunSpec.from_dict({"max_new_tokens": 48, "constraint": constraint, "constraint_text": text, **knobs})
    result = runner.run_to_result(PROMPT, spec)
    record = result["constraint"]
    assert record["valid"] and all(record["sequences_valid"]), (result["sequences"], record)
    if constraint == "json_schema":
        assert set(json.loads(result["text"])) == {"name", "age", "city"}


def test_constrained_greedy_gives_the_same_tokens_on_both_backends_and_with_drafts():
    spec = RunSpec.from_dict({"max_new_tokens": 48, "constraint": "json_schema", "constraint_text": SCHEMA})
    on_torch = runner.run_to_result(PROMPT, spec)
    on_jax = runner.run_to_result(PROMPT, spec.replace(backend="jax", cache="static"))
    assert on_jax["token_ids"] == on_torch["token_ids"] and on_jax["constraint"]["valid"]
    drafted = runner.run_to_result(PROMPT, spec.replace(backend="jax", strategy="assisted", prompt_lookup=4))
    assert drafted["token_ids"] == on_torch["token_ids"] and drafted["constraint"]["valid"]


def test_a_constraint_that_allows_any_text_leaves_greedys_tokens_alone():
    plain = runner.run_to_result(PROMPT, RunSpec(max_new_tokens=40))
    anything = runner.run_to_result(PROMPT, RunSpec.from_dict(
        {"max_new_tokens": 40, "constraint": "regex", "constraint_text": "(?s:.*)"}))
    assert anything["token_ids"] == plain["token_ids"] and anything["constraint"]["valid"]
    assert anything["constraint"]["changed_steps"] == 0


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_a_long_repeat_is_masked_at_every_step_on_smollm2_and_one_past_the_engines_limit_is_refused(backend):
    """a{100000} keeps one token of 49,152 allowed at every step (the mask held past the first token), and the
    short output is incomplete; a{1000000}, past the engine's lexer work per token, never reaches the model."""
    spec = RunSpec.from_dict({"max_new_tokens": 8, "constraint": "regex", "constraint_text": "a{100000}",
                              "backend": backend})
    result = runner.run_to_result("Say something.", spec)
    assert set(result["text"]) == {"a"}
    removed = [row["removed"] for token in result["tokens"] for row in token["stages"] if row["stage"] == "constraint"]
    assert removed == [49_151] * 8
    assert result["constraint"]["verdict"] == "incomplete: the grammar needed more tokens"
    with pytest.raises(PlaygroundError, match="too large for the grammar engine .* 200,000 units of lexer work"):
        spec.replace(constraint_text="a{1000000}")

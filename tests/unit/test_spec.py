"""RunSpec validation: every bad value is refused with one line naming the field and what is allowed."""

import pytest

from playground.errors import PlaygroundError
from playground.spec import RunSpec


def test_defaults_are_valid_and_round_trip():
    spec = RunSpec()
    assert RunSpec.from_dict(spec.to_dict()) == spec
    assert RunSpec.from_json("") == spec
    assert hash(spec) == hash(RunSpec())


@pytest.mark.parametrize(("data", "fragment"), [
    ({"max_new_tokens": 0}, "max_new_tokens=0"),
    ({"max_new_tokens": 100000}, "max_new_tokens=100000"),
    ({"strategy": "nucleus"}, "strategy 'nucleus' is not one of: greedy, sampling, beam, assisted"),
    ({"cache": "paged"}, "cache 'paged' is not one of"),
    ({"backend": "tpu"}, "backend 'tpu'"),
    ({"top_p": 0}, "top_p=0.0 is out of range; allowed: (0.0, 1.0]"),
    ({"temperature": -1}, "temperature"),
    ({"max_new_tokens": "ten"}, "max_new_tokens must be an integer, got 'ten'"),
    ({"max_new_tokens": True}, "max_new_tokens must be an integer"),
    ({"temperature": float("nan")}, "temperature must be a finite number"),
    ({"colour": "red"}, "unknown spec key(s) colour"),
    ({"num_return_sequences": 2}, "needs strategy 'beam'"),
    ({"model": " "}, "model must not be empty"),
    ({"num_beams": 9}, "num_beams=9 is out of range; allowed: [1, 8]"),
    ({"strategy": "beam", "num_beams": 1}, "is greedy search; use num_beams 2-8, or strategy 'greedy'"),
    ({"strategy": "beam", "num_beams": 2, "num_return_sequences": 3}, "exceeds num_beams=2 (beam search returns at "
                                                                      "most its beams); raise num_beams"),
    ({"strategy": "beam", "num_return_sequences": 0}, "num_return_sequences=0 is out of range"),
])
def test_bad_values_are_refused_with_a_one_line_message(data, fragment):
    with pytest.raises(PlaygroundError) as info:
        RunSpec.from_dict(data)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '"greedy"', "{", "null"])
def test_api_spec_that_is_not_a_json_object_is_refused(text):
    with pytest.raises(PlaygroundError, match="spec"):
        RunSpec.from_json(text)


def test_json_numbers_are_coerced_to_the_field_type():
    spec = RunSpec.from_dict({"max_new_tokens": 8.0, "temperature": 1, "assistant": ""})
    assert spec.max_new_tokens == 8 and isinstance(spec.max_new_tokens, int)
    assert spec.temperature == 1.0 and isinstance(spec.temperature, float)
    assert spec.assistant is None


def test_cap_on_new_tokens_follows_the_environment(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_NEW_TOKENS", "16")
    with pytest.raises(PlaygroundError, match=r"allowed: \[1, 16\]"):
        RunSpec(max_new_tokens=17)


def test_caches_page_table_matches_the_compatibility_rules():
    from playground.compatibility import markdown_table
    from tests.helpers import ROOT

    assert markdown_table() in (ROOT / "docs" / "caches.md").read_text()


def test_a_knob_some_strategies_read_is_refused_under_the_others_with_its_records_reason():
    """Which knobs refuse a value under a strategy that ignores them is the knob's record (`unread`), and which
    strategies read it their entries' `knobs`: a knob registered from here is refused the same way."""
    from playground import registry
    from playground.registry import Knob, Strategy

    knob = Knob(name="toy_drafts", kind=int, default=0, low=0, high=8, unread="only the toy strategy drafts")
    toy = Strategy(name="toy-drafting", label="toy", help="drafts", knobs=("toy_drafts",),
                   impl={"torch": lambda spec: None})  # validated only: nothing runs it
    with registry.registered(knob, toy):
        assert RunSpec.from_dict({"strategy": "toy-drafting", "toy_drafts": 3}).toy_drafts == 3
        with pytest.raises(PlaygroundError, match=r"^toy_drafts=3 needs strategy 'toy-drafting' \(only the toy "
                                                  r"strategy drafts\); strategy 'greedy' does not read it$"):
            RunSpec.from_dict({"toy_drafts": 3})
        assert RunSpec.from_dict({"toy_drafts": 0}).strategy == "greedy"  # its default is never refused

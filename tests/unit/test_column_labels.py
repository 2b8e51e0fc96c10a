"""Column names say what sets each column apart, wherever a column is named."""

from __future__ import annotations

from playground.ui.labels import column_labels
from playground.ui.outcome import empty_outcome
from playground.ui.settings import page_settings

SAMPLING = {"strategy": "sampling", "cache": "dynamic", "temperature": 0.9}


def test_columns_that_differ_in_one_knob_are_named_by_it():
    names = column_labels([SAMPLING | {"dry_multiplier": 0.0}, SAMPLING | {"dry_multiplier": 0.8},
                           SAMPLING | {"repetition_penalty": 1.3}])
    assert names == ["1: sampling · dynamic · repetition penalty off · DRY multiplier off",
                     "2: sampling · dynamic · repetition penalty off · DRY multiplier 0.8",
                     "3: sampling · dynamic · repetition penalty 1.3 · DRY multiplier off"]
    assert len(set(n.split(": ", 1)[1] for n in names)) == 3


def test_a_constraint_is_named_by_its_kind_and_a_setting_a_column_does_not_read_is_left_out():
    greedy = {"strategy": "greedy", "cache": "dynamic"}
    schema = greedy | {"constraint": "json_schema", "constraint_text": '{"type": "object"}'}
    names = column_labels([greedy, schema, SAMPLING])
    assert names[0] == "1: greedy · dynamic · no constraint" and names[1] == "2: greedy · dynamic · schema"
    assert "temperature" not in names[0] and names[2] == "3: sampling · dynamic · no constraint"
    # same kind, other text: the text tells them apart; one value held as 1 and as 1.0 is not a difference
    other = greedy | {"constraint": "json_schema", "constraint_text": '{"type": "array", "items": {}}'}
    assert column_labels([schema, other | {"repetition_penalty": 1}]) == [
        "1: greedy · dynamic · constraint text “…type\": \"object\"}”",
        "2: greedy · dynamic · constraint text “…\": \"array\", \"ite…”"]
    assert column_labels([greedy, greedy]) == ["1: greedy · dynamic", "2: greedy · dynamic"]


def test_the_outcome_names_columns_by_what_differs():
    settings = page_settings("Hi", 0, "raw", [SAMPLING | {"dry_multiplier": 0.8}, SAMPLING])
    outcome = empty_outcome(settings, [0, 2])
    assert outcome["labels"][0] == "1: sampling · dynamic · DRY multiplier 0.8"
    assert outcome["labels"][2] == "2: sampling · dynamic · DRY multiplier off" and outcome["labels"][1] is None

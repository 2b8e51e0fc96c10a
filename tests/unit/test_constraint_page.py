"""Constraints on the page and the API: the column's constraint controls reach the run (and stay out of a link
when unset), a bad constraint is the notice's one line and the API's gr.Error, the token view marks where the mask
took out the model's top token and the card says whether the output is valid, and the presets run as set."""

from __future__ import annotations

import json
from typing import Any

import gradio as gr
import pytest

from playground.ui import columns
from playground.ui.constraint_view import token_classes, tooltip_lines, verdict_html
from playground.ui.presets import PRESETS
from playground.ui.table import metric_value
from playground.ui.wiring import api_run


def test_a_columns_constraint_reaches_its_settings_and_is_left_out_when_unset():
    values = {**columns.control_values({}), "constraint": "regex", "constraint_text": "[0-9]+"}
    settings = columns.column_settings(values)
    assert (settings["constraint"], settings["constraint_text"]) == ("regex", "[0-9]+")
    assert columns.notice_text(settings) == ""
    plain = columns.column_settings(columns.control_values({}))
    assert "constraint" not in plain and "constraint_text" not in plain  # links without one stay as they were
    assert columns.control_values(settings)["constraint_text"] == "[0-9]+"


def test_a_bad_constraint_is_one_line_on_the_page_and_through_the_api():
    values = {**columns.control_values({}), "constraint": "regex", "constraint_text": "[0-9"}
    notice = columns.notice_text(columns.column_settings(values))
    assert notice.startswith("⚠ constraint_text is not a valid regular expression") and "\n" not in notice
    with pytest.raises(gr.Error, match="constraint_text is not a valid regular expression"):
        next(api_run("hi", json.dumps({"constraint": "regex", "constraint_text": "[0-9"})))


def _token(**known: Any) -> Any:
    return {"id": 5, "text": "1", "p": 1.0, "entropy": 0.0, "p_model": 0.2, "entropy_model": 2.0, "top": None,
            "draft": None, **known}


def test_the_token_view_says_what_the_mask_allowed_and_marks_a_changed_choice():
    masked = _token(stages=[{"stage": "constraint", "removed": 49142, "moved": 0.8}],
                    alternatives=[{"id": 9, "text": " The", "p": 0.0, "p_model": 0.6, "removed_by": "constraint"}])
    lines = tooltip_lines(masked, 49152)
    assert lines[0] == "constraint: 10 of 49,152 tokens allowed, 0.800 of the model's probability masked out"
    assert "the model's top token ' The' (p 0.600) was not allowed" in lines[1]
    assert token_classes(masked) == ["masked"] and tooltip_lines(_token(), 10) == []


def test_the_card_says_valid_or_incomplete_with_the_masks_cost():
    record = {"kind": "json_schema", "valid": False, "verdict": "incomplete: the grammar needed more tokens",
              "checked_by": "json.loads + jsonschema", "sequences_valid": [False], "changed_steps": 2,
              "mass_removed_mean": 0.25, "vocab_size": 49152}
    result: Any = {"constraint": record, "tokens": [_token()] * 5}
    note = verdict_html(result)
    assert "⚠" in note and "incomplete: the grammar needed more tokens" in note and "raise max new tokens" in note
    assert "at 2 of 5 steps" in note and "0.250" in note
    assert metric_value(result | {"metrics": {}}, "constraint_changed_steps") == 2
    assert verdict_html({"constraint": {**record, "valid": True, "verdict": "valid"}, "tokens": []}).startswith(
        "<div class='constraint-note ok'>✓")
    assert verdict_html({"tokens": []}) == ""


def test_the_constraint_presets_run_as_set():
    for name in ("JSON, free vs schema", "Pick one"):
        for column in PRESETS[name].columns:
            assert columns.problem(column, check_sources=False) == "", (name, column)
    kinds = [c.get("constraint", "none") for c in PRESETS["JSON, free vs schema"].columns]
    assert kinds == ["none", "json_schema", "regex"]

"""The page's Sampler lab tab without a browser: which knobs count as named, the stages' view, the `chain` API
endpoint, and refusals as one gr.Error line."""

from __future__ import annotations

import json

import gradio as gr
import pytest

from playground import sampler_lab
from playground.ui import lab_tab

pytest.importorskip("jax")


def values(**changed) -> list:
    """The tab's knob values in lab_knobs() order: the lab's defaults, then `changed`."""
    return [changed.get(name, lab_tab.lab_default(name)) for name in sampler_lab.lab_knobs()]


def test_a_knob_is_named_when_it_leaves_the_labs_default():
    knobs = dict(zip(sampler_lab.lab_knobs(), values(top_p=0.8, top_k=0.0, temperature=1.0), strict=True))
    request = lab_tab.lab_request("0.5, 0.3, 0.2", lab_tab.PROBABILITIES, "1, 2", "", "torch", knobs)
    assert request.named == ("top_p",) and request.spec.top_k == 0 and request.history == (1, 2)
    assert [stage.name for stage in sampler_lab.stages(request)] == ["top_p"]


def test_apply_draws_each_stage_and_the_final_distribution():
    view, result = lab_tab.apply_chain("0.5, 0.2, 0.15, 0.1, 0.05", lab_tab.PROBABILITIES, "", "", "jax",
                                       *values(top_p=0.8, mirostat_tau=1.2))
    assert [stage["name"] for stage in result["stages"]] == ["top_p", "mirostat"]
    assert view.count('class="lab-stage"') == 3  # two stages, then the final distribution
    assert "removed 2</span> (3, 4)" in view and "removed 1</span> (2)" in view
    assert [entry["id"] for entry in result["final"]] == [0, 1]


def test_logits_and_a_refusal():
    _, result = lab_tab.apply_chain("2, 1, -inf", lab_tab.LOGITS, "", "", "torch", *values())
    assert [entry["id"] for entry in result["final"]] == [0, 1] and result["stages"] == []
    with pytest.raises(gr.Error, match=r"history\[0\]=7 is out of range: the distribution has 3 entries"):
        lab_tab.apply_chain("0.5, 0.3, 0.2", lab_tab.PROBABILITIES, "7", "", "torch", *values())


def test_the_chain_api_endpoint_takes_a_json_request():
    result = lab_tab.api_chain(json.dumps({"probs": [0.5, 0.3, 0.15, 0.05], "top_a": 0.5, "backend": "jax",
                                           "history": [0, 1]}))
    assert result["stages"][0]["removed"] == [3] and result["backend"] == "jax"
    for bad, message in (("[1]", "JSON object"), ('{"probs": ["a"]}', r"probs\[0\]='a' is not a number"),
                         ('{"probs": [1], "top_q": 2}', "top_q: not a knob of the lab")):
        with pytest.raises(gr.Error, match=message):
            lab_tab.api_chain(bad)

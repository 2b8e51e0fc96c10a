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


def test_a_whole_vocabulary_draws_the_kept_bars_up_to_a_cap_and_the_rest_as_one():
    """Gemma 3's 262,144 entries, all tied, through top-k 5 (PyTorch's keeps every tie): 24 bars and one for the
    other 262,120 with their summed mass, and the page's JSON cut to its first ids with each list's length."""
    vocab = 262_144
    view, shown = lab_tab.apply_chain(", ".join(["1"] * vocab), lab_tab.PROBABILITIES, "", "", "torch",
                                      *values(top_k=5))
    rows = view.split('class="lab-stage"')[1:]
    assert len(rows) == 2  # top-k, then the final distribution
    for row in rows:
        assert row.count('class="lab-bar"') == lab_tab.SHOWN and row.count('class="lab-bar lab-rest"') == 1
        assert f"kept {vocab:,}" in row and f"+{vocab - lab_tab.SHOWN:,}</small>" in row
        rest = (vocab - lab_tab.SHOWN) / vocab
        assert f"{vocab - lab_tab.SHOWN:,} more kept tokens: p {rest:.4f} together" in row
    stage = shown["stages"][0]
    assert stage["kept_count"] == vocab and len(stage["kept"]) == len(stage["p"]) == lab_tab.JSON_SHOWN
    assert shown["final_count"] == vocab and len(shown["final"]) == lab_tab.JSON_SHOWN
    assert len(json.dumps(shown)) < 50_000


def test_the_rest_bar_sums_what_the_cap_leaves_out():
    drawn = lab_tab.bars(list(range(30)), [0.5] + [0.01] * 29)
    assert len(drawn.shown) == lab_tab.SHOWN and drawn.rest_count == 30 - lab_tab.SHOWN
    assert drawn.rest_p == pytest.approx(0.01 * (30 - lab_tab.SHOWN))
    assert lab_tab.bars([0, 1], [0.6, 0.4]).rest_count == 0


def test_a_knob_out_of_its_range_is_one_error_line_not_a_stage_left_off():
    """A number box without bounds, so the browser cannot quietly clamp top-k -3 to 0 (stage off): the request's
    check refuses it, naming the range."""
    top_k = sampler_lab.lab_knob("top_k")
    assert (top_k.low, top_k.high) == (None, None)
    with pytest.raises(gr.Error, match=r"top_k=-3 is out of range; allowed: \[0, inf\)"):
        lab_tab.apply_chain("0.5, 0.3, 0.2", lab_tab.PROBABILITIES, "", "", "torch", *values(top_k=-3))
    with pytest.raises(gr.Error, match=r"temperature=-1(\.0)? is out of range"):
        lab_tab.apply_chain("0.5, 0.3, 0.2", lab_tab.PROBABILITIES, "", "", "torch", *values(temperature=-1.0))


def test_a_typed_distribution_leaves_the_shape_it_came_from():
    """Typing in the box turns the dropdown to "typed by hand" (in the browser), which fills nothing."""
    with gr.Blocks() as demo:
        tab = lab_tab.build_lab_tab()
        lab_tab.wire(tab)
    assert lab_tab.TYPED not in lab_tab.SHAPES and lab_tab.TYPED in [c[0] for c in tab.shape.choices]
    typed = [d for d in demo.config["dependencies"] if d["targets"] == [(tab.distribution._id, "change")]]
    assert len(typed) == 1 and lab_tab.TYPED in typed[0]["js"] and typed[0]["outputs"] == [tab.shape._id]
    assert typed[0]["backend_fn"] is False and lab_tab.SHAPES["two peaks"] in typed[0]["js"]
    assert lab_tab.pick_shape(lab_tab.TYPED) == (gr.update(), gr.update())
    assert lab_tab.pick_shape("two peaks") == (lab_tab.SHAPES["two peaks"], lab_tab.PROBABILITIES)

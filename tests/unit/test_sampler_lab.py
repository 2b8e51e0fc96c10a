"""The sampler lab (`python -m playground chain`, playground/sampler_lab.py): any distribution through the logits
chain with no model, both backends agreeing stage by stage, an order that changes the cut, and one `error:` line
for bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from playground import sampler_lab
from playground.__main__ import main

pytest.importorskip("jax")

VOCAB = 24
PROBS = np.exp(np.linspace(2.0, -3.0, VOCAB))
PROBS = PROBS / PROBS.sum()
HISTORY = (3, 5, 7, 3, 5, 7, 3, 5)  # a text that repeats itself: the penalties and DRY have work to do

# every stage the lab offers, each with knobs that make it act on PROBS after HISTORY
STAGES = {
    "logit_bias": {"logit_bias": '{"2": 3.0, "0": -100}'},
    "repetition_penalty": {"repetition_penalty": 1.8},
    "presence_frequency": {"presence_penalty": 1.0, "frequency_penalty": 0.5},
    "no_repeat_ngram": {"no_repeat_ngram_size": 2},
    "dry": {"dry_multiplier": 1.5, "dry_allowed_length": 1},
    "temperature": {"temperature": 0.7},
    "dynamic_temperature": {"temperature": 1.2, "dynatemp_range": 0.8, "dynatemp_exponent": 1.5},
    "top_n_sigma": {"top_n_sigma": 1.0},
    "top_k": {"top_k": 5},
    "top_p": {"top_p": 0.7},
    "min_p": {"min_p": 0.1},
    "xtc": {"xtc_threshold": 0.08, "xtc_probability": 1.0},
    "typical_p": {"typical_p": 0.4},
    "epsilon_cutoff": {"epsilon_cutoff": 0.02},
    "eta_cutoff": {"eta_cutoff": 0.05},
    "top_a": {"top_a": 0.5},
    "p_less": {"p_less": 1},
    "mirostat": {"mirostat_tau": 2.0, "mirostat_eta": 0.1},
    "adaptive_p": {"adaptive_target": 0.3, "adaptive_decay": 0.9},
}


def lab(knobs: dict, backend: str, **given) -> sampler_lab.LabResult:
    request = sampler_lab.request({"probs": tuple(PROBS)}, knobs, history=given.get("history", HISTORY),
                                  backend=backend, breakers=given.get("breakers", ()))
    return sampler_lab.run(request)


def as_dict(stage) -> dict[int, float]:
    return dict(zip(stage["kept"], stage["p"], strict=True))


def assert_same(ours: sampler_lab.LabResult, theirs: sampler_lab.LabResult) -> None:
    """Both backends: the same stages, each keeping and removing the same ids with probabilities within 5e-5."""
    assert [s["name"] for s in ours["stages"]] == [s["name"] for s in theirs["stages"]]
    for mine, other in zip(ours["stages"], theirs["stages"], strict=True):
        assert set(mine["kept"]) == set(other["kept"]) and mine["removed"] == other["removed"], mine["name"]
        for token, p in as_dict(mine).items():
            assert p == pytest.approx(as_dict(other)[token], abs=5e-5), (mine["name"], token)
        assert mine["moved"] == pytest.approx(other["moved"], abs=5e-5)
    assert [entry["id"] for entry in ours["final"]] == [entry["id"] for entry in theirs["final"]]
    np.testing.assert_allclose([e["p"] for e in ours["final"]], [e["p"] for e in theirs["final"]], atol=5e-5)


def test_every_stage_is_offered_and_only_the_ones_a_bare_distribution_cannot_serve_are_left_out():
    offered = {stage.name for stage in sampler_lab.registry.processors()} - set(sampler_lab.NOT_IN_THE_LAB)
    assert offered == set(STAGES)
    assert "constraint" not in sampler_lab.lab_knobs() and "sampler_order" in sampler_lab.lab_knobs()


@pytest.mark.parametrize("stage", list(STAGES))
def test_each_stage_acts_the_same_on_both_backends(stage):
    results = {backend: lab(STAGES[stage], backend) for backend in ("torch", "jax")}
    assert_same(results["jax"], results["torch"])
    named = [s for s in results["torch"]["stages"] if s["name"] == stage]
    assert len(named) == 1 and named[0]["moved"] > 1e-3, f"{stage} did nothing to the distribution"
    assert sum(entry["p"] for entry in results["torch"]["final"]) == pytest.approx(1.0, abs=1e-6)


def test_the_whole_chain_at_once_agrees_across_backends_with_dry_breaker_ids():
    knobs = {"repetition_penalty": 1.3, "dry_multiplier": 1.0, "dry_allowed_length": 1, "top_k": 12, "top_p": 0.95,
             "min_p": 0.02, "top_a": 0.05, "p_less": 2, "mirostat_tau": 4.0}
    # a breaker among the repeated ids stops DRY's matches through it
    free, broken = (lab(knobs, "torch", breakers=breakers) for breakers in ((), (7,)))
    assert as_dict(free["stages"][1]) != as_dict(broken["stages"][1])
    for breakers in ((), (7,)):
        assert_same(lab(knobs, "jax", breakers=breakers), lab(knobs, "torch", breakers=breakers))


def test_every_stage_is_off_unless_named_and_temperature_is_one():
    result = lab({}, "torch")
    assert result["stages"] == []  # top-k's default of 50 and every other stage stay out
    np.testing.assert_allclose([e["p"] for e in result["final"]], sorted(PROBS, reverse=True), atol=1e-6)


def test_an_order_that_changes_the_cut_on_both_backends():
    """min-p after a hot temperature keeps more tokens than min-p on the raw distribution: the flattened
    distribution puts more tokens above 0.2 x the best."""
    knobs = {"temperature": 3.0, "min_p": 0.2}
    for backend in ("torch", "jax"):
        default = lab(knobs, backend)  # temperature, then min-p
        swapped = lab({**knobs, "sampler_order": "min_p,temperature"}, backend)
        assert [s["name"] for s in default["stages"]] == ["temperature", "min_p"]
        assert [s["name"] for s in swapped["stages"]] == ["min_p", "temperature"]
        raw_cut = {i for i, p in enumerate(PROBS) if p >= 0.2 * PROBS.max()}
        hot = PROBS ** (1 / 3.0)
        hot_cut = {i for i, p in enumerate(hot / hot.sum()) if p >= 0.2 * (hot / hot.sum()).max()}
        assert {e["id"] for e in swapped["final"]} == raw_cut
        assert {e["id"] for e in default["final"]} == hot_cut and len(hot_cut) > len(raw_cut)
    assert_same(lab({**knobs, "sampler_order": "min_p,temperature"}, "jax"),
                lab({**knobs, "sampler_order": "min_p,temperature"}, "torch"))


def test_logits_are_taken_as_given_and_minus_inf_is_an_entry_already_removed():
    logits = (2.0, 1.0, -float("inf"), 0.0)
    result = sampler_lab.run(sampler_lab.request({"logits": logits}, {"top_k": 2}, backend="jax"))
    weights = np.exp([2.0, 1.0])
    assert [e["id"] for e in result["final"]] == [0, 1]
    np.testing.assert_allclose([e["p"] for e in result["final"]], weights / weights.sum(), atol=1e-6)
    assert result["stages"][0]["removed"] == [3]  # top-k removed id 3; id 2 was never in


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        main(["chain", *argv])
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_prints_the_json_contract(capsys):
    code, out, err = run_cli(capsys, "--probs", "0.5,0.2,0.15,0.1,0.05", "--top-p", "0.8", "--backend", "jax",
                             "--history", "1,1", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert set(result) == {"stages", "final"}
    (stage,) = result["stages"]
    assert {"name", "kept", "p", "removed", "moved"} <= set(stage) and stage["kept"] == [0, 1, 2]
    assert stage["removed"] == [3, 4] and stage["moved"] == pytest.approx(0.15, abs=1e-6)
    assert [e["id"] for e in result["final"]] == [0, 1, 2]
    code, out, _ = run_cli(capsys, "--probs", "0.5,0.5", "--top-a", "0.5")
    assert code == 0 and out.splitlines()[-1].startswith("final (2 tokens, torch)")


@pytest.mark.parametrize(("argv", "message"), [
    (("--probs=0.5,-0.2,0.7",), "probs[1]=-0.2 is not allowed; probabilities are finite numbers >= 0"),
    (("--probs", "0,0,0"), "probs are all zero"),
    (("--probs", "0.5,0.5", "--history", "0,2"), "history[1]=2 is out of range: the distribution has 2 entries"),
    (("--probs", "0.5,0.5", "--history", "1,x"), "--history entry 'x' is not a token id"),
    (("--probs", "0.5,0.5", "--dry-breaker-ids", "9"), "dry_breaker_ids[0]=9 is out of range"),
    (("--probs", "0.5,0.5", "--top-p", "1.5"), "top_p=1.5 is out of range; allowed: (0.0, 1.0]"),
    (("--probs", "0.5,0.5", "--mirostat-tau", "30"), "mirostat_tau=30.0 is out of range"),
    (("--probs", "0.5,0.5", "--p-less", "3"), "p_less 3 is not one of: 0, 1, 2"),
    (("--probs", "0.5,0.5", "--sampler-order", "top_k,nucleus"), "sampler_order names 'nucleus', which is not a stage"),
    (("--probs", "0.5,abc"), "--probs entry 'abc' is not a number"),
    (("--logits=1,nan",), "logits[1]=nan is not allowed"),
    (("--probs", "0.5", "--logits", "1"), "not allowed with argument"),
])
def test_bad_input_is_one_error_line(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


# llama.cpp's tests/test-sampling.cpp: its vectors whose settings lie within our knobs' ranges (it also tries a
# temperature and a top-p of 0, a min-p above 1 and penalties of 5 and 50, which RunSpec refuses). Its XTC and
# typical checks read the kept probabilities before renormalising; here they are renormalised.
Q = [0.1, 0.2, 0.3, 0.4]
LLAMA_CPP = [
    (Q, {"top_k": 1}, (), [1.0]),
    (Q, {"top_k": 3}, (), [0.44444, 0.33333, 0.22222]),
    (Q, {"top_k": 4}, (), [0.4, 0.3, 0.2, 0.1]),
    (Q, {"top_p": 0.7}, (), [0.571429, 0.428571]),
    (Q, {"top_p": 0.8}, (), [0.44444, 0.33333, 0.22222]),
    (Q, {"min_p": 0.24}, (), [0.4, 0.3, 0.2, 0.1]),
    (Q, {"min_p": 0.26}, (), [0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9]),
    (Q, {"min_p": 0.49}, (), [0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9]),
    (Q, {"min_p": 0.51}, (), [0.4 / 0.7, 0.3 / 0.7]),
    (Q, {"min_p": 0.74}, (), [0.4 / 0.7, 0.3 / 0.7]),
    (Q, {"min_p": 0.76}, (), [1.0]),
    (Q, {"min_p": 1.0}, (), [1.0]),
    (Q[::-1], {"xtc_probability": 1.0, "xtc_threshold": 0.09}, (), [1.0]),
    (Q[::-1], {"xtc_probability": 1.0, "xtc_threshold": 0.19}, (), [2 / 3, 1 / 3]),
    (Q[::-1], {"xtc_probability": 1.0, "xtc_threshold": 0.29}, (), [0.5, 1 / 3, 1 / 6]),
    (Q[::-1], {"xtc_probability": 1.0, "xtc_threshold": 0.39}, (), [0.4, 0.3, 0.2, 0.1]),
    ([0.97, 0.01, 0.01, 0.01], {"typical_p": 0.5}, (), [1.0]),
    ([0.4, 0.2, 0.2, 0.2], {"typical_p": 0.5}, (), [1 / 3, 1 / 3, 1 / 3]),
    ([0.25] * 4, {"dry_multiplier": 1.0, "dry_base": 1.1, "dry_allowed_length": 2}, (0, 1),
     [0.25, 0.25, 0.25, 0.25]),
    ([0.25] * 4, {"dry_multiplier": 1.0, "dry_base": 1.1, "dry_allowed_length": 2}, (0, 1, 2, 0, 1),
     [0.296923, 0.296923, 0.296923, 0.109232]),
    ([0.2] * 5, {"dry_multiplier": 2.0, "dry_base": 1.1, "dry_allowed_length": 2}, (0, 1, 2, 0, 1),
     [0.241818] * 4 + [0.032727]),
    ([0.2] * 5, {"dry_multiplier": 1.0, "dry_base": 1.1, "dry_allowed_length": 4}, (0, 1, 2, 3, 4, 0, 1), [0.2] * 5),
    (Q, {"top_n_sigma": 1.0}, (), [0.571429, 0.428571]),
    (Q, {"top_n_sigma": 3.0}, (), [0.4, 0.3, 0.2, 0.1]),
    ([0.1, 0.15, 0.2, 0.25, 0.3], {"p_less": 1}, (), [0.54545455, 0.45454545]),
    ([0.2] * 5, {"p_less": 1}, (), [0.2] * 5),  # Σp² = p: a uniform row keeps every token
]


@pytest.mark.parametrize(("probs", "knobs", "history", "expected"), LLAMA_CPP)
def test_llama_cpps_sampler_vectors_on_both_backends(probs, knobs, history, expected):
    for backend in ("torch", "jax"):
        request = sampler_lab.request({"probs": probs}, knobs, history=history, backend=backend)
        final = [entry["p"] for entry in sampler_lab.run(request)["final"]]
        np.testing.assert_allclose(final, sorted(expected, reverse=True), atol=5e-5, err_msg=backend)


def test_a_dry_breaker_id_stops_the_match_as_in_llama_cpp():
    knobs = {"dry_multiplier": 1.0, "dry_base": 1.1, "dry_allowed_length": 2}
    for backend in ("torch", "jax"):
        request = sampler_lab.request({"probs": [0.2] * 5}, knobs, history=(0, 1, 3, 4, 0, 1), backend=backend,
                                      breakers=(3,))
        np.testing.assert_allclose([e["p"] for e in sampler_lab.run(request)["final"]], [0.2] * 5, atol=5e-5)

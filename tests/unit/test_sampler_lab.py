"""The sampler lab (`python -m playground chain`, playground/sampler_lab.py): any distribution through the logits
chain with no model, both backends agreeing stage by stage, an order that changes the cut, and one `error:` line
for bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from playground import sampler_lab
from playground.__main__ import main
from playground.errors import PlaygroundError
from playground.spec import RunSpec

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
    (("--probs", "0.5,0.5", "--top-p", "1.5"), "top_p=1.5 is out of range; allowed: [0.0, 1.0]"),
    (("--probs", "0.5,0.5", "--temperature", "-0.5"), "temperature=-0.5 is out of range; allowed: [0.0, inf)"),
    (("--probs", "0.5,0.5", "--min-p", "-0.1"), "min_p=-0.1 is out of range; allowed: [0.0, inf)"),
    (("--probs", "0.5,0.5", "--repetition-penalty", "0"),
     "repetition_penalty=0.0 is out of range; allowed: (0.0, inf)"),
    (("--probs", "0.5,0.5", "--presence-penalty", "inf"), "presence_penalty must be a finite number, got inf"),
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


# llama.cpp's tests/test-sampling.cpp, main(): each call's probabilities, expected probabilities and settings as the
# file writes them, with its test function's name. The lab takes each stage's whole domain (a temperature and a
# top-p of 0, a min-p above 1, penalties of 50 and 5) where a run keeps narrower ranges. llama.cpp's XTC and
# typical checks read the kept probabilities before renormalising: every expected row is compared renormalised,
# as a multiset padded with zeros (its rows list some in id order, some best first). XTC's probability 0.99
# draws "apply" from the seed 0 on both backends. Its DRY tests set dry_penalty_last_n to the history's length,
# which the lab reads whole.
Q = [0.1, 0.2, 0.3, 0.4]
Q5 = [0.2] * 5
LLAMA_CPP = [
    # test_temp
    (Q, {"temperature": 1.0}, (), [0.1, 0.2, 0.3, 0.4]),
    (Q, {"temperature": 0.0}, (), [0.0, 0.0, 0.0, 1.0]),
    # test_temp_ext (a range of 0 leaves the fixed temperature)
    (Q, {"temperature": 1.0, "dynatemp_range": 0.0, "dynatemp_exponent": 1.0}, (), [0.1, 0.2, 0.3, 0.4]),
    (Q, {"temperature": 0.0, "dynatemp_range": 0.0, "dynatemp_exponent": 1.0}, (), [0.0, 0.0, 0.0, 1.0]),
    # test_top_k
    (Q, {"top_k": 1}, (), [1.0]),
    (Q, {"top_k": 3}, (), [0.44444, 0.33333, 0.22222]),
    (Q, {"top_k": 4}, (), [0.4, 0.3, 0.2, 0.1]),
    (Q, {"top_k": 0}, (), [0.1, 0.2, 0.3, 0.4]),
    # test_top_p
    (Q, {"top_p": 0.0}, (), [1.0]),
    (Q, {"top_p": 0.7}, (), [0.571429, 0.428571]),
    (Q, {"top_p": 0.8}, (), [0.44444, 0.33333, 0.22222]),
    (Q, {"top_p": 1.0}, (), [0.1, 0.2, 0.3, 0.4]),
    # test_min_p
    (Q, {"min_p": 0.00}, (), [0.1 / 1.0, 0.2 / 1.0, 0.3 / 1.0, 0.4 / 1.0]),
    (Q, {"min_p": 0.24}, (), [0.1 / 1.0, 0.2 / 1.0, 0.3 / 1.0, 0.4 / 1.0]),
    (Q, {"min_p": 0.26}, (), [0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9]),
    (Q, {"min_p": 0.49}, (), [0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9]),
    (Q, {"min_p": 0.51}, (), [0.3 / 0.7, 0.4 / 0.7]),
    (Q, {"min_p": 0.74}, (), [0.3 / 0.7, 0.4 / 0.7]),
    (Q, {"min_p": 0.76}, (), [0.4 / 0.4]),
    (Q, {"min_p": 1.00}, (), [0.4 / 0.4]),
    (Q, {"min_p": 1.05}, (), [0.4 / 0.4]),
    # test_xtc (probability, threshold)
    (Q[::-1], {"xtc_probability": 0.99, "xtc_threshold": 0.09}, (), [0.1]),
    (Q[::-1], {"xtc_probability": 0.99, "xtc_threshold": 0.19}, (), [0.2, 0.1]),
    (Q[::-1], {"xtc_probability": 0.99, "xtc_threshold": 0.29}, (), [0.3, 0.2, 0.1]),
    (Q[::-1], {"xtc_probability": 0.99, "xtc_threshold": 0.39}, (), [0.4, 0.3, 0.2, 0.1]),
    # test_typical
    ([0.97, 0.01, 0.01, 0.01], {"typical_p": 0.5}, (), [0.97]),
    ([0.4, 0.2, 0.2, 0.2], {"typical_p": 0.5}, (), [0.2, 0.2, 0.2]),
    # test_penalties (repeat penalty, frequency, presence) after the history
    (Q5, {"repetition_penalty": 50.0}, (0,), [0, 0.25, 0.25, 0.25, 0.25]),
    (Q5, {"repetition_penalty": 50.0}, (0, 1, 2), [0, 0, 0, 0.5, 0.5]),
    (Q5, {"repetition_penalty": 50.0}, (0, 1, 2, 0, 0), [0, 0, 0, 0.5, 0.5]),
    (Q5, {"frequency_penalty": 5.0, "presence_penalty": 5.0}, (0,),
     [0.000011, 0.249997, 0.249997, 0.249997, 0.249997]),
    (Q5, {"frequency_penalty": 5.0, "presence_penalty": 5.0}, (0, 1, 2),
     [0.000023, 0.000023, 0.000023, 0.499966, 0.499966]),
    (Q5, {"frequency_penalty": 5.0, "presence_penalty": 5.0}, (0, 1, 2, 0, 0),
     [0.000000, 0.000023, 0.000023, 0.499977, 0.499977]),
    # test_dry (multiplier, base, allowed length; its breakers case is the test below)
    ([0.25] * 4, {"dry_multiplier": 1.0, "dry_base": 1.1, "dry_allowed_length": 2}, (0, 1),
     [0.25, 0.25, 0.25, 0.25]),
    ([0.25] * 4, {"dry_multiplier": 1.0, "dry_base": 1.1, "dry_allowed_length": 2}, (0, 1, 2, 0, 1),
     [0.296923, 0.296923, 0.109232, 0.296923]),
    (Q5, {"dry_multiplier": 2.0, "dry_base": 1.1, "dry_allowed_length": 2}, (0, 1, 2, 0, 1),
     [0.241818, 0.241818, 0.032727, 0.241818, 0.241818]),
    (Q5, {"dry_multiplier": 1.0, "dry_base": 1.1, "dry_allowed_length": 4}, (0, 1, 2, 3, 4, 0, 1), Q5),
    # test_top_n_sigma (0 is off since llama.cpp's PR 13345)
    (Q, {"top_n_sigma": 1.0}, (), [0.0, 0.0, 0.428571, 0.571429]),
    (Q, {"top_n_sigma": 0.0}, (), [0.1, 0.2, 0.3, 0.4]),
    (Q, {"top_n_sigma": 3.0}, (), [0.1, 0.2, 0.3, 0.4]),
    # test_p_less
    ([0.1, 0.15, 0.2, 0.25, 0.3], {"p_less": 1}, (), [0.45454545, 0.54545455]),
    (Q5, {"p_less": 1}, (), Q5),  # Σp² = p: a uniform row keeps every token
]


def as_row(probs: list[float], vocab: int) -> np.ndarray:
    """A distribution as llama.cpp's checks compare it: renormalised, zero-padded to the vocabulary, best first."""
    row = np.zeros(vocab)
    row[:len(probs)] = np.asarray(probs) / np.sum(probs)
    return np.sort(row)[::-1]


@pytest.mark.parametrize(("probs", "knobs", "history", "expected"), LLAMA_CPP)
def test_llama_cpps_sampler_vectors_on_both_backends(probs, knobs, history, expected):
    for backend in ("torch", "jax"):
        request = sampler_lab.request({"probs": probs}, knobs, history=history, backend=backend)
        final = [entry["p"] for entry in sampler_lab.run(request)["final"]]
        np.testing.assert_allclose(as_row(final, len(probs)), as_row(expected, len(probs)), atol=5e-5,
                                   err_msg=backend)


def test_a_dry_breaker_id_stops_the_match_as_in_llama_cpp():
    knobs = {"dry_multiplier": 1.0, "dry_base": 1.1, "dry_allowed_length": 2}
    for backend in ("torch", "jax"):
        request = sampler_lab.request({"probs": [0.2] * 5}, knobs, history=(0, 1, 3, 4, 0, 1), backend=backend,
                                      breakers=(3,))
        np.testing.assert_allclose([e["p"] for e in sampler_lab.run(request)["final"]], [0.2] * 5, atol=5e-5)


def test_the_lab_ranges_reach_past_runs_which_stay_as_they_were():
    """The lab takes llama.cpp's edge values; a run refuses each of them as before, and the lab's widgets offer
    the lab's range."""
    edges = {"temperature": 0.0, "top_k": 10_000, "top_p": 0.0, "min_p": 1.05, "repetition_penalty": 50.0,
             "presence_penalty": -5.0, "frequency_penalty": 5.0}
    for name, value in edges.items():
        assert getattr(sampler_lab.request({"probs": Q}, {name: value}).spec, name) == value
        with pytest.raises(PlaygroundError, match=f"{name}=.* is out of range"):
            RunSpec.from_dict({"strategy": "sampling", name: value})
    assert sampler_lab.lab_knob("top_p").low == 0.0 and not sampler_lab.lab_knob("top_p").low_open
    unbounded = sampler_lab.lab_knob("presence_penalty")
    assert (unbounded.low, unbounded.high, unbounded.step) == (None, None, None)  # a number box, not a slider
    assert sampler_lab.lab_knob("dry_base") == sampler_lab.registry.knob("dry_base")  # no lab range: run's


def test_temperature_zero_keeps_every_best_token_on_both_backends():
    """A tie at the top stays a tie: temperature 0 keeps each best logit as it is, as at min-p 1 and above."""
    for knobs in ({"temperature": 0.0}, {"min_p": 1.0}, {"min_p": 3.0}):
        for backend in ("torch", "jax"):
            result = sampler_lab.run(sampler_lab.request({"probs": [0.3, 0.1, 0.3, 0.3]}, knobs, backend=backend))
            assert [e["id"] for e in result["final"]] == [0, 2, 3], (knobs, backend)
            np.testing.assert_allclose([e["p"] for e in result["final"]], [1 / 3] * 3, atol=1e-6)


# llama.cpp's tests/test-sampling.cpp, test_sampler_queue: 10,000 tokens with logit ln(id) (id 0 has p 0) through
# top-k (k), top-p (p) and min-p (m) in the order given; after each stage its expected count and the least
# likely id kept, by the file's own formulas. The calls as main() makes them: (order, top_k, top_p, min_p).
N_QUEUE = 10_000
QUEUE = [("k", 10000, 1.0, 1.0), ("k", 1, 1.0, 1.0), ("p", 10000, 1.0, 1.0), ("p", 10000, 0.0, 1.0),
         ("m", 10000, 1.0, 1.0), ("m", 10000, 1.0, 1e-12), ("k", 100, 1.0, 1.0), ("p", 10000, 0.0003, 1.0),
         ("p", 10000, 0.8, 1.0), ("m", 10000, 1.0, 9997.9 / 9999.0), ("m", 10000, 1.0, 0.1),
         ("kp", 100, 0.8, 0.1), ("km", 100, 0.8, 0.1), ("pk", 100, 0.8, 0.1), ("pm", 100, 0.8, 0.1),
         ("mk", 100, 0.8, 0.1), ("mp", 100, 0.8, 9997.9 / 9999.0), ("mp", 100, 0.8, 0.1),
         ("kpm", 100, 0.8, 0.1), ("kmp", 100, 0.8, 0.1), ("pkm", 100, 0.8, 0.1), ("pmk", 100, 0.8, 0.1),
         ("mkp", 100, 0.8, 0.1), ("mpk", 100, 0.8, 0.1)]
QUEUE_STAGES = {"k": "top_k", "p": "top_p", "m": "min_p"}


def queue_expectations(order: str, top_k: int, top_p: float, min_p: float) -> list[tuple[int, int]]:
    """(count kept, least likely id kept) after each stage, as test_sampler_queue computes them."""
    size, min_id, expected = N_QUEUE, 0, []
    for stage in order:
        if stage == "k":
            size = min(size, top_k)
            min_id = max(min_id, N_QUEUE - top_k)
        elif stage == "p":
            divisor = N_QUEUE * (N_QUEUE - 1) // 2 - min_id * (min_id - 1) // 2
            target = math.ceil(np.float32(top_p) * divisor)
            min_id, size, total = N_QUEUE, 0, 0
            while True:  # at least one token stays
                min_id, size, total = min_id - 1, size + 1, total + min_id - 1
                if total >= target:
                    break
            if min_id == 1:  # id 0 (p = 0) stays beside id 1: top-p stops only once the mass is reached
                min_id, size = 0, size + 1
        else:
            size = min(max(math.ceil((1.0 - np.float32(min_p)) * N_QUEUE), 1), size)
            min_id = min(max(math.floor(np.float32(min_p) * N_QUEUE), 1, N_QUEUE - size), N_QUEUE - 1)
        expected.append((size, min_id))
    return expected


@pytest.mark.parametrize(("order", "top_k", "top_p", "min_p"), QUEUE)
def test_llama_cpps_sampler_queue_on_both_backends(order, top_k, top_p, min_p):
    logits = tuple(math.log(i) if i else -math.inf for i in range(N_QUEUE))
    values = {"top_k": top_k, "top_p": top_p, "min_p": min_p}
    knobs = {QUEUE_STAGES[s]: values[QUEUE_STAGES[s]] for s in order}
    knobs["sampler_order"] = ",".join(QUEUE_STAGES[s] for s in order)
    expected = queue_expectations(order, top_k, top_p, min_p)
    for backend in ("torch", "jax"):
        result = sampler_lab.run(sampler_lab.request({"logits": logits}, knobs, backend=backend))
        shown = {stage["name"]: stage for stage in result["stages"]}
        for stage, (size, min_id) in zip(order, expected, strict=True):
            name = QUEUE_STAGES[stage]
            kept = shown[name]["kept"] if name in shown else [entry["id"] for entry in result["final"]]
            # id 0 (logit ln 0 = -inf) is an entry already removed, which the lab never lists as kept
            assert (len(kept), min(kept)) == (min(size, N_QUEUE - 1), max(min_id, 1)), (backend, name)

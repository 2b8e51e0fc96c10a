"""A branch is a faithful continuation: its forced prefix counts as output for every stage of the logits chain
that reads the generated tokens, so step k of a branch equals step k of the run it came from, on both backends."""

from __future__ import annotations

import pytest

from playground import runner
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from tests.helpers import module_tiny_model

pytest.importorskip("torchax")

PROMPT = "abcabcabc abc"
NEW = 8
FORK = 3  # the branch forces the run's first FORK tokens


@pytest.fixture(scope="module")
def local_model(tmp_path_factory):
    with module_tiny_model(tmp_path_factory, seed=4) as path:
        yield path


def _run(model: str, backend: str, knobs: dict, prefix: tuple[int, ...] = ()) -> dict:
    spec = RunSpec(model=model, backend=backend, cache="static" if backend == "jax" else "dynamic",
                   max_new_tokens=NEW - len(prefix), prefix_ids=prefix, **knobs)
    return dict(runner.run_to_result(PROMPT, spec))


def _step(record: dict) -> tuple:
    """What a step shows: the token, its probabilities, and each stage's cut."""
    stages = tuple((s["stage"], s["removed"], round(s["moved"], 4)) for s in record["stages"] or ())
    return record["id"], round(record["p"], 4), round(record["p_model"], 4), stages


# each stage that reads the generated tokens, set so that it acts on this tiny model within NEW tokens
READERS = {
    "presence_penalty": {"presence_penalty": 1.5},
    "frequency_penalty": {"frequency_penalty": 0.9},
    "min_new_tokens": {"min_new_tokens": 5},
}


@pytest.mark.slow  # each stage alone on each backend: the fast lane's check has every stage on at once (below)
@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("stage", sorted(READERS))
def test_a_branch_s_steps_equal_the_run_s_steps_at_the_same_positions(local_model, backend, stage):
    knobs = READERS[stage]
    whole = _run(local_model, backend, knobs)
    assert len(whole["tokens"]) == NEW
    # the stage acts at the fork and after it: otherwise the comparison proves nothing
    acted = [s for record in whole["tokens"][FORK:] for s in record["stages"] if s["stage"] == "presence_frequency"
             and s["moved"] > 1e-3 or s["stage"] == "min_new_tokens" and s["removed"]]
    assert acted, f"{stage} moved nothing after token {FORK}"
    branch = _run(local_model, backend, knobs, prefix=tuple(whole["token_ids"][:FORK]))
    assert [_step(r) for r in branch["tokens"]] == [_step(r) for r in whole["tokens"][FORK:]]


def test_every_penalty_on_at_once_on_both_backends(local_model):
    knobs = {"presence_penalty": 1.5, "frequency_penalty": 0.5, "min_new_tokens": 6, "repetition_penalty": 1.3,
             "no_repeat_ngram_size": 2}
    for backend in ("torch", "jax"):
        whole = _run(local_model, backend, knobs)
        branch = _run(local_model, backend, knobs, prefix=tuple(whole["token_ids"][:FORK]))
        assert [_step(r) for r in branch["tokens"]] == [_step(r) for r in whole["tokens"][FORK:]], backend


def test_min_new_tokens_may_reach_over_the_forced_prefix():
    assert RunSpec(max_new_tokens=2, prefix_ids=(1, 2, 3), min_new_tokens=5).min_new_tokens == 5
    with pytest.raises(PlaygroundError, match=r"min_new_tokens=6 is out of range; allowed: \[0, 5\]"):
        RunSpec(max_new_tokens=2, prefix_ids=(1, 2, 3), min_new_tokens=6)

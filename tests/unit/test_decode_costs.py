"""A draft model's measured cost per token, said in its column before the run, and the main model alone after it."""

import pytest

from playground.decode_costs import DecodeCosts, against_alone, draft_note
from playground.spec import RunSpec
from playground.ui.columns import notice_text

MAIN, DRAFT = "gemma-3-1b", "smollm2-135m"


def result(speed: float, busy: bool = False, stopped: bool = False, **spec) -> dict:
    return {"spec": RunSpec(**spec).to_dict(), "metrics": {"tokens_per_s": speed}, "stopped": stopped,
            "extra": {"machine_load": {"busy": busy}}}


@pytest.fixture
def costs():
    return DecodeCosts()


def test_plain_runs_give_each_models_cost_and_a_drafted_run_the_pairs(costs):
    costs.record(result(3.0, model=MAIN))
    costs.record(result(25.0, model=DRAFT, strategy="sampling", busy=True))
    costs.record(result(0.5, model=MAIN, strategy="assisted", assistant=DRAFT))
    spec = RunSpec(model=MAIN, strategy="assisted", assistant=DRAFT)
    note = draft_note(spec, costs)
    assert note.startswith("ℹ Drafting pays only when")
    assert f"draft {DRAFT} 40 ms/token (busy machine) against {MAIN} 333 ms/token" in note
    assert "the draft costs 0.12x the main model per token" in note
    assert "the last run of this pair took 2000 ms/token against 333 ms/token alone" in note
    assert draft_note(spec.replace(backend="jax", cache="static"), costs).count("not measured here yet") == 1


def test_what_is_not_measured_is_named_and_nothing_is_estimated(costs):
    note = draft_note(RunSpec(model=MAIN, strategy="assisted", assistant=DRAFT), costs)
    assert f"the cost per token of {DRAFT} and {MAIN} is not measured here yet" in note
    assert "ms/token" not in note


@pytest.mark.parametrize("skipped", [
    {"strategy": "assisted", "prompt_lookup": 3},  # no draft model
    {"strategy": "beam", "num_beams": 2},  # not one sequence
    {"strategy": "contrastive", "top_k": 4, "penalty_alpha": 0.6},  # top_k candidate rows per token
    {"strategy": "dola", "dola_layers": "low"},  # the premature layers' heads per token
])
def test_runs_that_say_nothing_of_one_models_cost_are_not_recorded(costs, skipped):
    costs.record(result(9.0, model=MAIN, **skipped))
    costs.record(result(9.0, model=MAIN, stopped=True))  # a stopped run's rate covers part of a run
    assert draft_note(RunSpec(model=MAIN, strategy="assisted", assistant=DRAFT), costs).count(MAIN) == 1
    assert "not measured" in draft_note(RunSpec(model=MAIN, strategy="assisted", assistant=DRAFT), costs)


def test_columns_without_a_draft_model_get_no_note(costs):
    assert draft_note(RunSpec(model=MAIN), costs) == ""
    assert draft_note(RunSpec(model=MAIN, strategy="assisted", prompt_lookup=3), costs) == ""


def test_the_finished_run_compares_itself_with_the_main_model_alone(costs):
    costs.record(result(3.0, model=MAIN))
    assert against_alone(result(0.5, model=MAIN, strategy="assisted", assistant=DRAFT), costs) == (
        f"{MAIN} alone: 3.0 tok/s here (0.17x with this draft)")
    assert against_alone(result(3.0, model=MAIN), costs) == ""


def test_a_draft_model_column_notice_is_information_not_a_refusal():
    notice = notice_text({"model": "smollm2-135m", "strategy": "assisted", "assistant": "smollm2-135m"})
    assert notice.startswith("ℹ") and "Drafting pays only when" in notice

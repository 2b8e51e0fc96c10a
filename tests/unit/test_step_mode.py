"""Step mode: stepping a column recomputes from its branch's tokens, so three steps give greedy's first three
tokens on both backends (on JAX, steps after the first compile nothing); a candidate forks, the branch tree keeps
every branch and resumes any node; typed text is forced; beam search shows its beams, assisted decoding its
drafts; a step pressed during a run is refused and the run goes on."""

from __future__ import annotations

import pytest

from playground import runner
from playground.spec import RunSpec
from playground.ui import stepping
from playground.ui.live import LIVE_RUNS
from playground.ui.step_runs import absorb, step_spec
from playground.ui.step_tree import StepTree
from tests.helpers import module_tiny_model
from tests.unit.test_ui import page_data

pytest.importorskip("torchax")

PROMPT = "the lamp"  # 8 byte tokens: every step's prompt and prefix stay in one prefill bucket
SESSION = type("Request", (), {"session_hash": "step-session"})()


def no_progress(*args, **kwargs):
    return None


@pytest.fixture(scope="module")
def local_model(tmp_path_factory):
    with module_tiny_model(tmp_path_factory, seed=4) as path:
        yield path


@pytest.fixture(scope="module")
def page():
    from playground.ui.wiring import build_ui

    return build_ui()[1]


def _spec(model: str, backend: str = "torch", **knobs) -> dict:
    base = {"model": model, "backend": backend, "cache": "static" if backend == "jax" else "dynamic",
            "max_new_tokens": 12, "chat": False}
    return RunSpec.from_dict({**base, **knobs}).to_dict()


def _step(tree: StepTree, count: int = 1) -> dict:
    spec = step_spec(tree, count)
    assert isinstance(spec, RunSpec), spec
    result = runner.run_to_result(PROMPT, spec)
    absorb(tree, result, spec.max_new_tokens)
    return result


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_three_steps_give_greedy_s_tokens_and_a_jax_step_compiles_nothing(local_model, backend):
    whole = runner.run_to_result(PROMPT, RunSpec.from_dict({**_spec(local_model, backend), "max_new_tokens": 3}))
    tree = StepTree(_spec(local_model, backend))
    steps = [_step(tree) for _ in range(3)]
    assert tree.ids() == whole["token_ids"]
    # each step's record is the run's record at that position (the same distribution and cut)
    assert [round(tree.nodes[i].record["p"], 4) for i in tree.path()] == [round(t["p"], 4) for t in whole["tokens"]]
    if backend == "jax":  # the prompt's bucket and the cache's length hold: the first step's programs serve all
        assert [s["metrics"]["compile_s"] for s in steps[1:]] == [0.0, 0.0]


def test_step_8_then_a_fork_at_a_lower_candidate_keeps_both_branches(local_model):
    tree = StepTree(_spec(local_model))
    _step(tree, 8)
    assert len(tree.ids()) == 8 and len(tree.branches()) == 1
    tree.resume(tree.path()[2])  # back to token 2
    record = tree.nodes[tree.current].record
    lower = next(a for a in record["alternatives"] if a["id"] != tree.nodes[tree.current].token)
    first_text = tree.text(tree.leaves()[0])
    tree.fork(lower["id"], lower["text"], lower["logprob_model"])
    _step(tree)
    branches = tree.branches()
    assert len(branches) == 2 and branches[0].text == first_text and branches[0].forked_at is None
    assert branches[1].forked_at == 2 and branches[1].length == 4 and branches[1].text != first_text[:len(
        branches[1].text)]
    # the fork's log-probability is the sum of its tokens' model log-probabilities
    assert branches[1].logprob == pytest.approx(sum(tree.nodes[i].logprob for i in tree.path()), abs=1e-6)
    tree.resume(branches[0].leaf)  # any node resumes: the first branch goes on where it ended
    _step(tree)
    assert len(tree.ids()) == 9 and tree.ids()[:8] == [tree.nodes[i].token for i in tree.path(branches[0].leaf)]


def test_a_sampling_step_is_reproducible_and_a_beam_step_shows_the_beams(local_model):
    sampled = [StepTree(_spec(local_model, strategy="sampling", seed=5)) for _ in range(2)]
    for tree in sampled:
        _step(tree)
        _step(tree)
    assert sampled[0].ids() == sampled[1].ids()
    beams = StepTree(_spec(local_model, strategy="beam", num_beams=3, num_return_sequences=2))
    _step(beams)
    _step(beams)
    assert beams.last["depth"] == 2 and len(beams.last["beams"]) == 2 and not beams.nodes
    assert isinstance(step_spec(StepTree({**beams.spec, "max_new_tokens": 2}, last=beams.last), 1), str)


def test_an_assisted_step_shows_its_drafts(local_model):
    tree = StepTree(_spec(local_model, strategy="assisted", prompt_lookup=3))
    _step(tree, 8)
    assert tree.last["drafts"] and all("accepted" in step for step in tree.last["drafts"])


def test_the_page_steps_forks_forces_typed_text_and_refuses_a_step_during_a_run(page, local_model):
    data = page_data(page, {page.prompt: PROMPT, page.steps: {}, page.visible: [True, False, False, False],
                            page.columns[0].knobs["model"]: local_model, page.step_text: " zz"})
    updates = list(stepping.step_columns(page, data, 1, SESSION, no_progress))
    steps = updates[-1][page.steps]
    tree = steps["trees"][0]
    column = page.columns[0]
    shown = next(u for u in updates if column.step_candidates in u)
    assert shown[column.step_candidates].count("data-token=") == 5 and "chosen" in shown[column.step_candidates]
    assert shown[column.output] == tree.text() and "data-node='0'" in shown[column.branches]
    lower = tree.nodes[0].record["alternatives"][1]["id"]
    forked = stepping.pick(page, steps, 0, type("Event", (), {"token": lower})(), SESSION)
    assert forked[column.output] == tree.text() and tree.ids() == [lower]
    assert forked[column.branches].count("<li") == 2  # the branch tree keeps both branches
    typed = stepping.force_text(page, {**data, page.steps: steps}, SESSION)
    assert typed[column.output].endswith(" zz") and [n.how for n in tree.nodes][-3:] == ["typed"] * 3
    with LIVE_RUNS.working(SESSION.session_hash, "a run"):
        refused = list(stepping.step_columns(page, {**data, page.steps: steps}, 1, SESSION, no_progress))
        with LIVE_RUNS.working(SESSION.session_hash, "a step"):
            pass  # a step that ended while the run goes on leaves the session busy with the run
        fork = stepping.pick(page, steps, 0, type("Event", (), {"token": lower})(), SESSION)
    assert fork == {page.step_status: "⚠ **not forked:** a run is under way; it goes on, and Step works once it "
                                      "ends (or after Stop)"}
    assert LIVE_RUNS.doing(SESSION.session_hash) is None
    assert refused == [{page.step_status: "⚠ **not stepped:** a run is under way; it goes on, and Step works once "
                                          "it ends (or after Stop)"}]
    assert len(tree.ids()) == 4  # nothing stepped meanwhile


@pytest.mark.parametrize("strategy", ["contrastive", "dola"])
def test_contrastive_and_dola_steps_show_candidates_and_what_the_method_weighed(local_model, strategy):
    from playground.ui.step_view import candidates_html

    tree = StepTree(_spec(local_model, strategy=strategy))
    _step(tree)
    _step(tree)
    shown = candidates_html(tree)
    assert shown.count("data-token=") == len(tree.nodes[tree.current].record["alternatives"]) > 1
    assert ("contrastive search:" if strategy == "contrastive" else "DoLa contrasted layer") in shown


def test_the_tree_lists_each_branch_with_its_fork_and_log_probability():
    tree = StepTree({"strategy": "greedy"})
    with pytest.raises(ValueError, match="nothing stepped yet"):
        tree.fork(1, "a", -1.0)
    record = {"alternatives": []}
    for token, logprob in ((1, -0.5), (2, -0.25), (3, -1.0)):
        tree.add(token, f"t{token}", "drawn", logprob, record)
    tree.resume(1)
    tree.fork(9, "t9", -3.0)  # a sibling of token 1 (node 1): the fork is at position 1
    tree.add(7, " typed", "typed", None)
    first, second = tree.branches()
    assert (first.text, first.forked_at, first.logprob, first.length) == ("t1t2t3", None, -1.75, 3)
    assert (second.text, second.forked_at, second.logprob, second.unscored) == ("t1t9 typed", 1, -3.5, 1)
    tree.resume(1)
    assert tree.fork(9, "t9", -3.0) == 3 and len(tree.nodes) == 5  # picking it again moves there, adds nothing
    with pytest.raises(ValueError, match="node 5 is not in the tree"):
        tree.resume(5)

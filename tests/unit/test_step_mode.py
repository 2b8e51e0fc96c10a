"""Step mode: stepping a column recomputes from its branch's tokens, so three steps give greedy's first three
tokens on both backends (on JAX, sized for the tree, no step after the first compiles anything, across buckets
and cache granules); a candidate forks, the branch tree keeps every branch and resumes any node, and the token
view follows the branch; typed text is forced; a sampling column's k-th Step draws what its whole run draws at
token k (the forced tokens' draws replayed), from the kept state of the step before; beam search shows its beams,
assisted decoding its drafts; a step pressed during a run is refused and the run goes on."""

from __future__ import annotations

import html

import pytest

from playground import runner
from playground.spec import RunSpec
from playground.ui import stepping
from playground.ui.live import LIVE_RUNS
from playground.ui.step_runs import absorb, step_spec
from playground.ui.step_tree import StepTree
from playground.ui.step_view import candidates_html, shown_candidates
from playground.ui.tokens import DEFAULT_COLOUR, ENTROPY_SCALE
from tests.helpers import fast_lane_keeps, module_tiny_model
from tests.unit.page_fakes import page_data

pytest.importorskip("torchax")

PROMPT = "the lamp"
PROMPT_TOKENS = 8  # byte tokens
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


# the fast lane: PyTorch's; JAX's greedy steps are the tree test's below, its sampled steps the replay test's
@pytest.mark.parametrize("backend", fast_lane_keeps(["torch", "jax"]))
def test_three_steps_give_greedy_s_tokens_and_a_jax_step_compiles_nothing(local_model, backend):
    whole = runner.run_to_result(PROMPT, RunSpec.from_dict({**_spec(local_model, backend), "max_new_tokens": 3}))
    tree = StepTree(_spec(local_model, backend))
    steps = [_step(tree) for _ in range(3)]
    assert tree.ids() == whole["token_ids"]
    # each step's record is the run's record at that position (the same distribution and cut)
    assert [round(tree.nodes[i].record["p"], 4) for i in tree.path()] == [round(t["p"], 4) for t in whole["tokens"]]
    if backend == "jax":  # sized for the tree: the first step's programs serve all
        assert [s["metrics"]["compile_s"] for s in steps[1:]] == [0.0, 0.0]


@pytest.mark.parametrize("cache", fast_lane_keeps(["static", "dynamic"], keep=1))  # the fast lane: dynamic
def test_every_jax_step_of_a_tree_runs_on_its_first_step_s_programs(local_model, cache):
    """Sized for the tree (the prompt and its max_new_tokens), a step compiles nothing after the tree's first,
    wherever it stands: the branch crosses the prompt's buckets (16, 32, 64) and the cache's 64-position
    granule, a single step follows Step 8 and a long run, and a forced candidate is stepped on; the tokens are
    an uninterrupted greedy run's."""
    tree = StepTree(_spec(local_model, "jax", cache=cache, max_new_tokens=70, min_new_tokens=70))
    first = _step(tree)
    programs = first["extra"]["compiled_programs"]
    later = [_step(tree, 8), _step(tree), _step(tree, 47), _step(tree)]  # the branch: 9, 10, 57, 58 tokens
    assert len(tree.ids()) == 58 and PROMPT_TOKENS + 58 > 64  # past buckets 16, 32, 64 and 64 positions
    tree.resume(tree.path()[20])
    record = tree.nodes[tree.current].record
    lower = next(a for a in record["alternatives"] if a["id"] != tree.nodes[tree.current].token)
    tree.fork(lower["id"], lower["text"], lower["logprob_model"])
    later += [_step(tree), _step(tree, 8)]
    tree.resume(tree.branches()[0].leaf)
    later.append(_step(tree, 1 << 30))  # run to the end: the first branch's last 12 tokens
    assert {r["extra"]["prefill_bucket"] for r in [first, *later]} == {128}  # the longest step's prompt: 8 + 69
    assert [r["extra"]["compiled_programs"] for r in later] == [programs] * len(later)
    assert all(r["metrics"]["compile_s"] == 0.0 for r in later)
    whole = runner.run_to_result(PROMPT, RunSpec.from_dict({**tree.spec, "cache": cache}))
    assert tree.ids() == whole["token_ids"]  # the first branch, run to its end


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


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_sampling_steps_draw_the_whole_runs_tokens_each_from_the_step_befores_kept_state(local_model, backend):
    """Step k replays the run's draws before token k (JAX: the key chain's splits; PyTorch: the generator's
    numbers), so six Steps give the six tokens of one run with the same seed, each token's p as the run's; in the
    column's store scope each Step restores the step before's cache and prefills its one new id, and on JAX
    nothing compiles after the first Step. XTC's coin (a random stage, one more draw per token) is replayed too."""
    from playground.backends import prefix_store

    for knobs in ({"top_k": 0}, {"top_k": 0, "xtc_threshold": 0.05, "xtc_probability": 0.5}):
        spec = _spec(local_model, backend, strategy="sampling", seed=5, temperature=1.5, max_new_tokens=10,
                     min_new_tokens=6, **knobs)  # no end-of-text before the sixth token
        whole = runner.run_to_result(PROMPT, RunSpec.from_dict({**spec, "max_new_tokens": 6}))
        tree, steps = StepTree(spec), []
        prefix_store.STORE.clear()
        for _ in range(6):
            step = step_spec(tree, 1)
            assert isinstance(step, RunSpec) and step.seed == 5
            steps.append(next(event.result for event in runner.run(PROMPT, step, scope="step-replay", judged=False)
                              if hasattr(event, "result")))
            absorb(tree, steps[-1], 1)
        prefix_store.STORE.clear()
        assert tree.ids() == whole["token_ids"]
        assert [tree.nodes[i].record["p"] for i in tree.path()] == pytest.approx([t["p"] for t in whole["tokens"]],
                                                                                 abs=1e-5)
        # the step at depth k restores the prompt and the k - 1 tokens before its last: one id prefilled
        assert [s["reuse"]["reused_tokens"] for s in steps] == [0] + [PROMPT_TOKENS + k - 1 for k in range(1, 6)]
        if backend == "jax":
            assert all(s["metrics"]["compile_s"] == 0.0 for s in steps[1:])


# the fast lane: the page on PyTorch; JAX's replayed draws are the test above's
@pytest.mark.parametrize("backend", fast_lane_keeps(["torch", "jax"]))
def test_a_sampling_column_s_steps_are_its_whole_run(page, local_model, backend):
    """Step 8 gives what eight Steps give, stepping the same node again draws the same token, and both are the
    column's own run with its seed, as Run to the end is."""
    data = page_data(page, {page.prompt: PROMPT, page.steps: {}, page.visible: [True, False, False, False],
                            page.seed: 5, **{page.columns[0].knobs[k]: v for k, v in {
                                "model": local_model, "backend": backend, "strategy": "sampling", "top_k": 0,
                                "cache": "static" if backend == "jax" else "dynamic", "max_new_tokens": 10,
                                "min_new_tokens": 8}.items()}})  # no end-of-text among the eight compared

    def press(steps: dict, count: int) -> StepTree:
        updates = list(stepping.step_columns(page, {**data, page.steps: steps}, count, SESSION, no_progress))
        return updates[-1][page.steps]["trees"][0]

    eight = press({}, 8)
    singles = {}
    for _ in range(8):
        singles = {"prompt": PROMPT, "trees": {0: press(singles, 1)}}
    drawn = eight.ids()
    assert singles["trees"][0].ids() == drawn and len(drawn) == 8
    assert "sampled with seed 5, its draws before token 7 replayed" in candidates_html(eight)
    eight.resume(eight.path()[3])  # token 4 again, from token 3: the same draw
    again = press({"prompt": PROMPT, "trees": {0: eight}}, 1)
    assert again.current == eight.path()[4] and len(again.nodes) == 8
    whole = runner.run_to_result(PROMPT, RunSpec.from_dict({**eight.spec, "max_new_tokens": 10}))
    assert press({}, stepping.TO_THE_END).ids() == whole["token_ids"] and drawn == whole["token_ids"][:8]


def test_a_beam_step_shows_the_beams(local_model):
    beams = StepTree(_spec(local_model, strategy="beam", num_beams=3, num_return_sequences=2))
    _step(beams)
    _step(beams)
    assert beams.last["depth"] == 2 and len(beams.last["beams"]) == 2 and not beams.nodes
    assert isinstance(step_spec(StepTree({**beams.spec, "max_new_tokens": 2}, last=beams.last), 1), str)


def test_every_jax_step_of_a_beam_tree_runs_on_its_first_step_s_programs(local_model):
    """A beam search's step searches again from the prompt one token (or eight) deeper; sized for the tree, every
    step after the first runs on its programs, and the last step's beams are the whole search's."""
    tree = StepTree(_spec(local_model, "jax", strategy="beam", num_beams=3, num_return_sequences=2,
                          max_new_tokens=12, min_new_tokens=12))
    first = _step(tree)
    programs = first["extra"]["compiled_programs"]
    assert programs and first["metrics"]["compile_s"] > 0  # the tree's first step compiled them
    later = [_step(tree), _step(tree, 8), _step(tree), _step(tree)]  # depths 2, 10, 11, 12
    assert tree.last["depth"] == 12 and len(tree.last["beams"]) == 2
    assert [r["extra"]["compiled_programs"] for r in later] == [programs] * len(later)
    assert all(r["metrics"]["compile_s"] == 0.0 for r in later)
    whole = runner.run_to_result(PROMPT, RunSpec.from_dict(tree.spec))
    assert [text for text, _ in tree.last["beams"]] == whole["sequences"]


def test_an_assisted_step_shows_its_drafts(local_model):
    tree = StepTree(_spec(local_model, strategy="assisted", prompt_lookup=3))
    _step(tree, 8)
    assert tree.last["note"].startswith("<div class='step-method'>drafts this step: ")  # assisted's view says it
    assert "accepted" in tree.last["note"] and tree.last["note"] in candidates_html(tree)


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
    # the token view follows the branch: its one token with the step's record (no cut of the last run to open)
    drawn = tree.nodes[0].record
    assert shown[column.tokens].count("<span class='tok") == 1 and "data-pos" not in shown[column.tokens]
    assert f"as drawn: p={drawn['p']:.3f}, entropy={drawn['entropy']:.2f}" in shown[column.tokens]
    lower = drawn["alternatives"][1]
    forked = stepping.pick(page, steps, DEFAULT_COLOUR, 0, type("Event", (), {"token": lower["id"]})(), SESSION)
    assert forked[column.output] == tree.text() and tree.ids() == [lower["id"]]
    assert forked[column.branches].count("<li") == 2  # the branch tree keeps both branches
    # the picked token in the token view: its own p and p_model at that position, the step's entropy
    assert f"#0 {lower['text']!r} (id {lower['id']})" in html.unescape(forked[column.tokens])
    assert f"as drawn: p={lower['p']:.3f}, entropy={drawn['entropy']:.2f}" in forked[column.tokens]
    assert f"model: p={lower['p_model']:.3f}" in forked[column.tokens]
    typed = stepping.force_text(page, {**data, page.steps: steps}, SESSION)
    assert typed[column.output].endswith(" zz") and [n.how for n in tree.nodes][-3:] == ["typed"] * 3
    assert typed[column.tokens].count("<span class='tok") == 4 and typed[column.tokens].count("hsl(") == 1  # unscored
    back = stepping.resume(page, steps, "model entropy", 0, type("Event", (), {"node": 0})(), SESSION)
    assert back[column.tokens].count("<span class='tok") == 1  # resumed at the first branch's token, by model entropy
    assert f"hsl({120 * (1 - min(drawn['entropy_model'] / ENTROPY_SCALE, 1)):.0f}," in back[column.tokens]
    stepping.resume(page, steps, DEFAULT_COLOUR, 0, type("Event", (), {"node": len(tree.nodes) - 1})(), SESSION)
    with LIVE_RUNS.working(SESSION.session_hash, "a run"):
        refused = list(stepping.step_columns(page, {**data, page.steps: steps}, 1, SESSION, no_progress))
        with LIVE_RUNS.working(SESSION.session_hash, "a step"):
            pass  # a step that ended while the run goes on leaves the session busy with the run
        fork = stepping.pick(page, steps, DEFAULT_COLOUR, 0, type("Event", (), {"token": lower["id"]})(),
                             SESSION)
    assert fork == {page.step_status: "⚠ **not forked:** a run is under way; it goes on, and Step works once it "
                                      "ends (or after Stop)"}
    assert LIVE_RUNS.doing(SESSION.session_hash) is None
    assert refused == [{page.step_status: "⚠ **not stepped:** a run is under way; it goes on, and Step works once "
                                          "it ends (or after Stop)"}]
    assert len(tree.ids()) == 4  # nothing stepped meanwhile


@pytest.mark.parametrize("strategy", ["contrastive", "dola"])
def test_contrastive_and_dola_steps_show_candidates_and_what_the_method_weighed(local_model, strategy):
    tree = StepTree(_spec(local_model, strategy=strategy))
    _step(tree)
    _step(tree)
    shown = candidates_html(tree)
    assert shown.count("data-token=") == len(shown_candidates(tree.nodes[tree.current].record)) > 1
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


def test_a_token_drawn_from_outside_the_top_five_is_listed_with_its_figures_and_marked(page):
    """A sample may draw a token the record's five candidates leave out: it is listed after them, with its p
    and p_model, marked, and a click on it forces it as any candidate's does."""
    alternatives = [{"id": i, "text": f"t{i}", "p": 0.2 - 0.01 * i, "p_model": 0.15, "removed_by": None,
                     "logprob_model": -1.9} for i in range(5)]
    record = {"id": 42, "text": "J", "p": 0.0123, "p_model": 0.000045, "logprob_model": -5.4, "entropy": 2.0,
              "entropy_model": 2.5, "top": None, "draft": None, "alternatives": alternatives, "stages": []}
    tree = StepTree({"strategy": "sampling", "seed": 5, "min_new_tokens": 0})
    tree.add(42, "J", "drawn", -5.4, record)
    shown = candidates_html(tree)
    assert shown.count("data-token=") == 6
    drawn = shown.split("data-token='42'")[1].split("</button>")[0]
    assert "p 0.012 · p_model 4.5e-05" in drawn and "drawn from outside the top 5" in drawn and "chosen" in \
        shown.split("data-token='42'")[0].rsplit("<button", 1)[1]
    inside = {**record, "id": 3, "text": "t3"}
    tree.add(3, "t3", "drawn", -1.9, inside)
    assert candidates_html(tree).count("data-token=") == 5 and "outside the top" not in candidates_html(tree)
    tree.resume(0)
    tree.add(42, "J", "drawn", -5.4, record)
    steps = {"trees": {0: tree}}
    event = type("Event", (), {"token": 42})()
    updates = stepping.pick(page, steps, DEFAULT_COLOUR, 0, event, SESSION)
    assert "forced 'J'" in updates[page.step_status]


def test_the_colour_toggle_redraws_the_branch_a_column_shows_and_the_run_elsewhere(page):
    """After stepping, a column's token view is its branch: the toggle recolours the branch, not the last run's
    tokens; a column whose view shows a run's tokens is left to the run's redraw."""
    tree = StepTree({"strategy": "greedy"})
    record = {"id": 7, "text": "x", "p": 0.9, "p_model": 0.5, "entropy": 0.1, "entropy_model": 3.5, "top": None,
              "draft": None, "alternatives": [], "stages": []}
    tree.add(7, "x", "drawn", -0.7, record)
    stepped = stepping.strip_html(tree, DEFAULT_COLOUR)
    updates = stepping.recolour_branches(page, {"trees": {0: tree, 1: tree}}, "model entropy",
                                         [stepped, "<div class='tokens'>a run's</div>", None, None])
    assert list(updates) == [page.columns[0].tokens]
    assert updates[page.columns[0].tokens] == stepping.strip_html(tree, "model entropy") != stepped

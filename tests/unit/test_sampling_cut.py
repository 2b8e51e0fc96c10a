"""The sampling cut's data: a token record and the spec its column applied -> rows of candidates with p_model, p,
what removed each and which was drawn; checked on records both backends produce for a tiny model."""

from __future__ import annotations

import pytest

from playground import runner
from playground.spec import RunSpec
from playground.ui.cut import branch_choices, branch_prefix, cut_html, cut_rows, removal_summary
from tests.helpers import fast_lane_keeps, module_tiny_model

pytest.importorskip("torchax")

NEW = 12
EOS = 256


@pytest.fixture(scope="module")
def local_model(tmp_path_factory):
    with module_tiny_model(tmp_path_factory, seed=3) as path:
        yield path


def sampled(model: str, backend: str, **knobs) -> dict:
    spec = RunSpec(model=model, backend=backend, cache="static", strategy="sampling", max_new_tokens=NEW,
                   min_new_tokens=NEW, seed=5, **knobs)
    return dict(runner.run_to_result("once upon a time", spec))


# the fast lane: PyTorch's; on JAX, test_token_probabilities draws each top-k 1 token with probability 1
@pytest.mark.parametrize("backend", fast_lane_keeps(["torch", "jax"]))
def test_with_top_k_1_only_the_drawn_token_survives(local_model, backend):
    result = sampled(local_model, backend, top_k=1, temperature=0.7)
    for token in result["tokens"]:
        rows = cut_rows(token, result["spec"])
        assert len(rows) == 5
        kept = [row for row in rows if row["removed_by"] is None]
        assert kept == [next(row for row in rows if row["drawn"])] and kept[0]["p"] == pytest.approx(1.0)
        assert kept[0] is rows[0]  # the model's favourite: top-1 keeps it whatever the temperature
        for row in rows[1:]:
            assert row["p"] == 0.0
            assert row["removed_by"] == ("min_new_tokens (12: no end of text yet)" if row["id"] == EOS
                                         else "top-k (k=1)")
    assert "top-k (k=1) removed" in removal_summary(cut_rows(result["tokens"][0], result["spec"]))


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_top_p_removes_what_lies_past_the_nucleus(local_model, backend):
    """temperature 0.1 and top_k=2 leave two candidates whose shares are known from p_model: the second is cut by
    top_p=0.7 exactly when the first holds 0.7 or more of their mass."""
    result = sampled(local_model, backend, top_k=2, top_p=0.7, temperature=0.1)
    seen = set()
    for token in result["tokens"]:
        first, second, *_ = [row for row in cut_rows(token, result["spec"]) if row["id"] != EOS]
        share = 1 / (1 + (second["p_model"] / first["p_model"]) ** 10)
        assert first["removed_by"] is None and first["p"] > 0
        expected = "top-p (0.7)" if share >= 0.7 else None
        if abs(share - 0.7) > 1e-3:  # recorded p_model values are rounded to 5 places
            assert second["removed_by"] == expected
            assert (second["p"] == 0.0) is (expected is not None)
        seen.add(second["removed_by"])
    assert {None, "top-p (0.7)"} <= seen


def test_a_drawn_token_outside_the_alternatives_gets_its_own_row():
    record = {"id": 9, "text": "z", "p": 0.01, "entropy": 2.0, "p_model": 0.02, "entropy_model": 2.1, "draft": None,
              "top": [("a", 0.6, 0.5)], "alternatives": [{"id": 1, "text": "a", "p": 0.6, "p_model": 0.5,
                                                          "removed_by": None}]}
    rows = cut_rows(record, RunSpec(strategy="sampling").to_dict())
    assert [(r["id"], r["drawn"]) for r in rows] == [(1, False), (9, True)]
    assert removal_summary(rows) == "every one of the 2 candidates shown stayed in the draw"


def test_the_chart_marks_the_drawn_token_and_forced_tokens_say_so(local_model):
    result = sampled(local_model, "torch", top_k=3)
    chart = cut_html(result, 0, "1: sampling")
    assert chart.count("◀ drawn") == 1 and "cut-row drawn" in chart
    assert "temperature 1.0 → top-k (k=3) → draw" in chart
    branched = {**result, "prefix": {"ids": [7, 8], "text": "ab", "pieces": ["a", "b"]}}
    assert "was forced" in cut_html(branched, 1, "1: sampling")
    assert branch_choices(branched, 1) == []
    assert [token for _, token in branch_choices(branched, 2)] == [a["id"] for a in result["tokens"][0]["alternatives"]]


def test_a_branch_prefix_is_the_output_up_to_the_token_then_the_choice():
    result = {"token_ids": [3, 4, 5], "prefix": {"ids": [1, 2], "text": "", "pieces": ["", ""]}}
    assert branch_prefix(result, 3, 40) == [1, 2, 3, 40]
    assert branch_prefix({"token_ids": [3, 4, 5], "prefix": None}, 0, 40) == [40]

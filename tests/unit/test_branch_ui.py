"""Branching from the page: a click opens the token's sampling cut, and "continue from here with" runs every column
of the last run again with the prefix forced (on a fake runner)."""

from __future__ import annotations

from typing import Any

import pytest

from playground.events import DoneEvent, TextEvent
from playground.spec import RunSpec
from playground.ui import branch
from playground.ui.outcome import empty_outcome
from tests.unit.page_fakes import fake_result

SETTINGS = {"prompt": "Hello", "seed": 3, "mode": "raw", "repeats": 1,
            "columns": [{"strategy": "greedy"}, {"strategy": "sampling"}, {"strategy": "greedy"}]}
REQUEST = type("Request", (), {"session_hash": "branch-session"})()


def result(ids: list[int], model: str = "smollm2-135m", strategy: str = "greedy",
           prefix: list[int] | None = None) -> dict[str, Any]:
    """A finished run whose every token lists two alternatives: itself and the id 90 + its position."""
    tokens = [{"id": t, "text": f"t{t}", "p": 0.9, "entropy": 0.3, "p_model": 0.8, "entropy_model": 0.4,
               "draft": None, "top": [[f"t{t}", 0.9, 0.8], [f"t{90 + n}", 0.1, 0.2]],
               "alternatives": [{"id": t, "text": f"t{t}", "p": 0.9, "p_model": 0.8, "removed_by": None},
                                {"id": 90 + n, "text": f"t{90 + n}", "p": 0.0, "p_model": 0.2, "removed_by": "top_k"}]}
              for n, t in enumerate(ids)]
    pieces = [f"t{i}" for i in prefix or []]
    return {**fake_result(ids, strategy=strategy),
            "spec": {**RunSpec(model=model, strategy=strategy).to_dict(), "chat": False, "seed": 3, "repeats": 2},
            "tokens": tokens, "prefix": {"ids": prefix, "text": "".join(pieces), "pieces": pieces} if prefix else None}


@pytest.fixture(scope="module")
def ui():
    from playground.ui.wiring import build_ui

    return build_ui()  # (the Blocks, its Page)


@pytest.fixture(scope="module")
def page(ui):
    return ui[1]


def outcome(mode: str = "raw") -> dict[str, Any]:
    done = empty_outcome({**SETTINGS, "mode": mode}, [0, 1, 2])
    done["results"][:3] = [result([1, 2, 3]), result([1, 5, 6], strategy="sampling"), result([4], model="gemma3-270m")]
    return done


def test_a_click_shows_the_cut_and_offers_every_alternative(page):
    updates = branch.pick(page, outcome(), 0, 2)
    assert "t3" in updates[page.cut] and "◀ drawn" in updates[page.cut] and "✂ top-k" in updates[page.cut]
    assert updates[page.branch_choice]["choices"] == [("'t3' (as drawn)", 3), ("'t92' (model p 0.200)", 92)]
    assert updates[page.branch_choice]["value"] == 92
    assert updates[page.branch]["interactive"] is True
    assert updates[page.picked] == branch.Picked(0, 2)


def test_branching_is_refused_with_the_reason_in_chat_mode_and_before_a_click(page):
    assert "chat" in branch.pick(page, outcome("chat"), 0, 1)[page.branch]["value"]
    assert branch.pick(page, outcome(), 0, None)[page.branch]["interactive"] is False
    status = list(branch.branch_all(page, outcome(), None, 92, "probability (as drawn)", REQUEST, lambda *a, **k: 0))
    assert status == [{page.status: "⚠ **not branched:** click or tap a token first"}]


def test_every_column_on_the_model_runs_again_from_the_forced_prefix(page, monkeypatch):
    from playground import runner

    specs: list[RunSpec] = []

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        specs.append(spec)
        yield TextEvent("t7", "t7", 1)
        yield DoneEvent(result([7], strategy=spec.strategy, prefix=list(spec.prefix_ids)))

    monkeypatch.setattr(runner, "run", fake_run)
    updates = list(branch.branch_all(page, outcome(), branch.Picked(0, 2), 92, "probability (as drawn)", REQUEST,
                                     lambda *a, **k: 0))
    assert [(s.strategy, s.prefix_ids, s.repeats, s.seed) for s in specs] == [
        ("greedy", (1, 2, 92), 1, 3), ("sampling", (1, 2, 92), 1, 3)]
    outputs = [u[page.columns[0].output] for u in updates if page.columns[0].output in u]
    assert outputs and all(text.startswith("t1t2t92") for text in outputs)
    third = [u[page.columns[2].notice] for u in updates if page.columns[2].notice in u]
    assert "runs gemma3-270m" in third[0]
    assert "1 refused or failed" in updates[-1][page.status]
    tokens = next(u[page.columns[1].tokens] for u in reversed(updates) if page.columns[1].tokens in u)
    assert tokens.count("tok forced") == 3 and "data-pos='3'" in tokens


def test_the_chart_and_the_branch_control_have_stable_ids(ui):
    demo, _ = ui
    ids = {block.elem_id for block in demo.blocks.values() if getattr(block, "elem_id", None)}
    assert {"sampling-cut", "branch-choice", "branch-from-token", "tokens-0"} <= ids

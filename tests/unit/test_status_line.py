"""The page's status line after Stop (through run_all with the UI tests' fake runner), a column's card while it waits
for the generation slot, and which events show a loading spinner."""

from __future__ import annotations

import pytest

from playground import runner
from playground.events import DoneEvent, ProgressEvent
from playground.ui import run as ui_run
from tests.unit.page_fakes import fake_result, page_data


@pytest.fixture(scope="module")
def ui():
    from playground.ui.wiring import build_ui

    return build_ui()


@pytest.fixture(scope="module")
def page(ui):
    return ui[1]


def _stopped_while_compiling() -> dict:
    stopped = fake_result([])
    stopped["stopped"], stopped["extra"] = True, {"stopped_while_compiling": True}
    stopped["metrics"] |= {"compile_s": 7.6, "ttft_s": None, "tokens_per_s": None}
    return stopped


def _run(page, monkeypatch, session: str, results: list[dict]) -> list[dict]:
    """run_all over the page's two default columns, the fake runner answering `results` in turn; Stop is pressed
    during a column whose result says `stop_here`."""
    request = type("Request", (), {"session_hash": session})()
    answers = iter(results)

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        yield ProgressEvent(0.0, "compiling the JAX programs")
        result = next(answers)
        if result.get("stop_here"):
            ui_run.stop_flag(request).set()
        yield DoneEvent({k: v for k, v in result.items() if k != "stop_here"})

    monkeypatch.setattr(runner, "run", fake_run)
    return list(ui_run.run_all(page, page_data(page), request, lambda *a, **k: None))


def test_a_column_stopped_while_compiling_is_never_reported_as_ran(page, monkeypatch):
    """Stop during the first column's JAX compile: that column says it stopped, the second is not run, and the
    status says both (never "✓ 1 column ran")."""
    updates = _run(page, monkeypatch, "stop-compile-status", [{**_stopped_while_compiling(), "stop_here": True}])
    status = updates[-1][page.status]
    assert not status.startswith("✓") and "column ran" not in status
    assert status == ("■ 1 stopped (column 1 while compiling, before its first token), 1 not run (stopped).")
    notice = [u[page.columns[0].notice] for u in updates if page.columns[0].notice in u][-1]
    assert notice.startswith("■ stopped while compiling")


def test_a_column_stopped_mid_run_is_counted_apart_from_those_that_finished(page, monkeypatch):
    cut = fake_result([1, 2, 3])
    cut["stopped"] = True
    updates = _run(page, monkeypatch, "stop-mid-status", [fake_result([1]), {**cut, "stop_here": True}])
    assert updates[-1][page.status] == ("■ 1 column ran, 1 stopped (column 2 after 3 tokens) on the same prompt "
                                        "with seed 3.")


def test_columns_that_all_finish_still_say_so(page, monkeypatch):
    updates = _run(page, monkeypatch, "finished-status", [fake_result([1]), fake_result([2])])
    assert updates[-1][page.status] == "✓ 2 columns ran on the same prompt with seed 3."


def test_a_column_waiting_for_the_slot_says_for_what_on_its_card_and_the_status_line(page, monkeypatch):
    request = type("Request", (), {"session_hash": "waiting-status"})()
    words = "waiting for a Long context run in another tab: about 40 s"

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        yield ProgressEvent(0.0, words)  # what the runner reports while the slot is held (test_generation_slot)
        yield DoneEvent(fake_result([1]))

    monkeypatch.setattr(runner, "run", fake_run)
    updates = list(ui_run.run_all(page, page_data(page), request, lambda *a, **k: None))
    waiting = next(u for u in updates if u.get(page.columns[0].notice) == f"◔ {words}")
    assert waiting[page.status].startswith(f"◔ **Column 1:** {words}")


def test_only_queued_work_shows_a_spinner_and_only_on_its_status_line(ui):
    """Events outside the queue (a knob's change, a preset, the warm-up's poll) answer at once: no spinner over
    their outputs. A queued generation shows its progress on its status line alone."""
    demo, page = ui
    config = demo.config
    ids = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
    quick = [d for d in config["dependencies"] if not d["queue"] and d["outputs"]]
    assert len(quick) > 100 and all(d["show_progress"] == "hidden" for d in quick)
    shown = {d["api_name"]: [ids[i] for i in d["show_progress_on"] or []] for d in config["dependencies"]
             if d["queue"] and d["show_progress"] != "hidden" and len(d["outputs"]) > 2}
    assert shown["run_columns"] == ["status"] and shown["advance"] == shown["typed"] == ["step-status"]
    assert shown["run_context_on_page"] == ["context-status"] and shown["run_sweep_on_page"] == ["sweep-status"]
    assert all(shown.values()), shown  # every queued event with many outputs names where its progress shows

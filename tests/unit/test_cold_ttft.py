"""Chat mode's cold TTFT on demand: after two turns through the page (the second restoring the first from the prefix
store), a column's button reruns its last turn cold, with the turn's own settings and history, and writes "cold TTFT
... vs warm ..." beside it, leaving the transcript, the output and the Result the table reads as they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from playground.backends import prefix_store
from playground.ui import run as ui_run
from playground.ui.cold_ttft import cold_ttft_line, compared, last_turn
from tests.helpers import module_tiny_model, save_tiny_model
from tests.unit.page_fakes import page_data
from tests.unit.test_openai_api import CHAT_TEMPLATE

SESSION = "cold-ttft-session"


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    with module_tiny_model(tmp_path_factory) as path:
        yield save_tiny_model(Path(path).parent / "tiny-chat", seed=2, chat_template=CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def page():
    from playground.ui.wiring import build_ui

    return build_ui()[1]


def _turn(page, data, prompt: str) -> dict:
    """One press of Run in chat mode: the last update of each component."""
    request = type("Request", (), {"session_hash": SESSION})()
    final: dict = {}
    for update in ui_run.run_all(page, {**data, page.prompt: prompt}, request, lambda *a, **k: None):
        final.update(update)
    return final


def test_the_button_measures_the_last_turn_cold_and_leaves_the_chat_as_it_was(page, chat_model):
    prefix_store.STORE.clear()
    col = page.columns[0]
    data = page_data(page, {page.mode: "chat", page.visible: [True, False, False, False],
                            col.knobs["model"]: chat_model, col.knobs["max_new_tokens"]: 4})
    first = _turn(page, data, "Name a colour.")
    data[page.conversation] = first[page.conversation]
    second = _turn(page, {**data, page.results: first[page.results]}, "And another one?")
    conversation, outcome = second[page.conversation], second[page.results]
    warm = outcome["results"][0]
    assert warm["reuse"]["reused_tokens"] > 0  # the second turn restored the first from the store
    assert f"reused {warm['reuse']['reused_tokens']} of" in second[col.notice]
    before = (list(conversation), list(outcome["results"]), second[col.chatbot])
    kept = (len(prefix_store.STORE), prefix_store.STORE.bytes)

    line = cold_ttft_line(conversation, outcome, 0, SESSION)
    assert line.startswith("cold TTFT ") and " s vs warm " in line
    assert f"(reused {warm['reuse']['reused_tokens']} of {warm['reuse']['prompt_tokens']} prompt tokens)" in line
    assert (conversation, outcome["results"], second[col.chatbot]) == before  # nothing it showed was replaced
    assert (len(prefix_store.STORE), prefix_store.STORE.bytes) == kept  # the cold run kept nothing
    assert last_turn(conversation, 0) == ("And another one?", [("Name a colour.", conversation[0]["replies"][0])])
    prefix_store.STORE.clear()


def test_before_a_turn_or_during_a_run_it_says_why_it_measured_nothing():
    from playground.ui.live import LIVE_RUNS

    first = cold_ttft_line([], {"results": [None] * 4}, 0, "nobody")
    assert first == "⚠ not measured: run a chat turn in this column first"
    with LIVE_RUNS.working("busy-session", "a run"):
        assert cold_ttft_line([], None, 0, "busy-session") == "⚠ not measured: a run is under way"


def test_the_line_says_when_the_turn_itself_reused_nothing():
    cold = {"metrics": {"ttft_s": 0.41}}
    warm = {"metrics": {"ttft_s": 0.05}, "reuse": {"reused_tokens": 812, "prompt_tokens": 845}}
    assert compared(cold, warm) == "cold TTFT 0.41 s vs warm 0.05 s (reused 812 of 845 prompt tokens)"
    warm["reuse"]["reused_tokens"] = 0
    assert compared(cold, warm).endswith("(the turn was cold too: nothing was reused)")

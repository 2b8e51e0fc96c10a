"""The page driven without a browser: its run handler on a fake runner, stop, columns added and removed, the
controls locked while it runs."""

from __future__ import annotations

import pytest

from playground.events import DoneEvent, HypothesisEvent, ProgressEvent, TextEvent
from playground.ui.columns import MAX_COLUMNS, notice_text
from playground.ui.export import decode_url_state, page_settings
from tests.unit.page_fakes import SETTINGS, fake_result, page_data, row


@pytest.fixture(scope="module")
def ui():
    from playground.ui.wiring import build_ui

    return build_ui()  # (the Blocks, its Page)


@pytest.fixture(scope="module")
def demo(ui):
    return ui[0]


@pytest.fixture(scope="module")
def page(ui):
    return ui[1]


def test_page_has_the_element_ids_scripts_rely_on(demo):
    ids = {block.elem_id for block in demo.blocks.values() if getattr(block, "elem_id", None)}
    assert {"prompt", "run", "metrics", "add-column", "stop", "output-0", "output-1", "output-2", "output-3"} <= ids
    assert "run" in {d.api_name for d in demo.fns.values()}




def test_run_all_runs_columns_in_turn_streams_text_and_fills_the_table(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run

    calls = []

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        calls.append((prompt, spec.seed, spec.chat, spec.strategy))
        yield ProgressEvent(0.5, "loading")
        yield TextEvent("t1", "t1", 1)
        yield DoneEvent(fake_result([1, 2], speed=10 * len(calls), strategy=spec.strategy))

    monkeypatch.setattr(runner, "run", fake_run)
    col1 = page.columns[1]
    data = page_data(page, {col1.knobs["strategy"]: "sampling"})
    request = type("Request", (), {"session_hash": "test-session"})()
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    assert calls == [("Hello", 3, False, "greedy"), ("Hello", 3, False, "sampling")]
    assert updates[0][col1.notice] == "waiting: column 2 waits for column 1"
    loading = next(u for u in updates if u.get(page.columns[0].notice) == "◔ loading")
    assert loading[page.status].startswith("◔ **Column 1:** loading")  # by Run, not only on the card below
    assert any(u.get(page.columns[0].output) == "t1" for u in updates)  # streamed before the end
    table = next(u[page.metrics] for u in reversed(updates) if page.metrics in u)
    assert row(table, "decode speed") == ["10.0", "**★ 20.0**"]
    assert updates[-1][page.status].startswith("✓ 2 columns ran")


def test_a_beam_column_shows_its_leading_beam_until_the_result_replaces_it(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        yield HypothesisEvent("The sky", 2)
        yield DoneEvent(fake_result([1, 2], strategy="beam"))

    monkeypatch.setattr(runner, "run", fake_run)
    col = page.columns[0]
    data = page_data(page, {col.knobs["strategy"]: "beam", page.visible: [True] + [False] * (MAX_COLUMNS - 1)})
    request = type("Request", (), {"session_hash": "beam-preview"})()
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    preview = next(u for u in updates if u.get(col.output) == "The sky")
    assert "leading beam after 2 tokens" in preview[col.notice] and "may change" in preview[col.notice]
    assert [u[col.output] for u in updates if col.output in u][-1] != "The sky"  # the result replaced it


def test_repeated_timing_interleaves_the_columns_and_reports_medians_with_ranges(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run

    order = []

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        order.append(spec.strategy)
        yield TextEvent("t1", "t1", 1)
        yield DoneEvent(fake_result([1, 2], speed=10.0 * len(order), strategy=spec.strategy))

    monkeypatch.setattr(runner, "run", fake_run)
    col1 = page.columns[1]
    data = page_data(page, {col1.knobs["strategy"]: "sampling", page.repeats: 3})
    request = type("Request", (), {"session_hash": "repeat-session"})()
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    assert order == ["greedy", "sampling"] * 3  # round by round, not column by column
    assert sum(1 for u in updates if u.get(page.columns[0].output) == "t1") == 1  # only the first round streams
    table = next(u[page.metrics] for u in reversed(updates) if page.metrics in u)
    assert row(table, "decode speed") == ["30.0 (10.0–50.0)", "40.0 (20.0–60.0)"]  # within the spread: no star
    assert "3 of 3 timed runs" in [u[page.columns[1].notice] for u in updates if page.columns[1].notice in u][-1]


def test_streamed_text_is_coalesced_so_updates_do_not_steal_the_cores(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run


    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        text = ""
        for i in range(50):  # 50 tokens arriving faster than STREAM_INTERVAL_S
            text += "x"
            yield TextEvent("x", text, i + 1)
        yield DoneEvent(fake_result(list(range(50))))

    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(ui_run, "STREAM_INTERVAL_S", 60.0)
    data = page_data(page, {page.columns[1].knobs["strategy"]: "sampling"})
    request = type("Request", (), {"session_hash": "coalesce-session"})()
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    streamed = [u[page.columns[0].output] for u in updates if page.columns[0].output in u]
    assert streamed[1] == "x"  # the first token shows at once (after the column is cleared)...
    assert len(streamed) == 3  # ...then nothing until the final text
    assert streamed[-1] == fake_result(list(range(50)))["text"]


def test_stop_before_a_column_skips_it(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run

    request = type("Request", (), {"session_hash": "stop-session"})()

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        ui_run.stop_flag(request).set()  # the user presses stop during column 1
        yield DoneEvent(fake_result([1]))

    monkeypatch.setattr(runner, "run", fake_run)
    updates = list(ui_run.run_all(page, page_data(page), request, lambda *a, **k: None))
    assert any(u.get(page.columns[1].notice) == "■ not run (stopped)" for u in updates)
    assert "1 column ran, 1 not run (stopped)" in updates[-1][page.status]


def test_stop_during_a_compile_says_the_column_stops_once_the_compile_ends(page, monkeypatch):
    from playground import runner
    from playground.events import ProgressEvent
    from playground.ui import run as ui_run

    request = type("Request", (), {"session_hash": "stop-compile-session"})()

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        yield ProgressEvent(0.0, "compiling the JAX programs")
        ui_run.stop_flag(request).set()  # Stop pressed while XLA compiles: the runner ticks the stage's age
        yield ProgressEvent(0.0, "compiling the JAX programs", elapsed_s=12.4)
        yield DoneEvent(fake_result([1]))

    monkeypatch.setattr(runner, "run", fake_run)
    updates = list(ui_run.run_all(page, page_data(page), request, lambda *a, **k: None))
    notices = [u[page.columns[0].notice] for u in updates if page.columns[0].notice in u]
    assert "◔ compiling the JAX programs" in notices
    assert "■ stops once this ends: compiling the JAX programs · 12 s so far" in notices


def test_a_run_stopped_while_compiling_says_the_compile_goes_on_in_the_background(page, monkeypatch):
    from playground import runner
    from playground.events import ProgressEvent
    from playground.ui import run as ui_run

    request = type("Request", (), {"session_hash": "stopped-compiling-session"})()
    stopped = fake_result([])
    stopped["stopped"], stopped["extra"] = True, {"stopped_while_compiling": True}
    stopped["metrics"] |= {"compile_s": 7.6, "ttft_s": None, "tokens_per_s": None}

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        yield ProgressEvent(0.0, "compiling the JAX programs")
        ui_run.stop_flag(request).set()  # the JAX path stops waiting for its compile at once
        yield DoneEvent(stopped)

    monkeypatch.setattr(runner, "run", fake_run)
    updates = list(ui_run.run_all(page, page_data(page), request, lambda *a, **k: None))
    notices = [u[page.columns[0].notice] for u in updates if page.columns[0].notice in u]
    assert notices[-1].startswith("■ stopped while compiling, after 8 s: the compile goes on in the background")


def test_colour_toggle_redraws_only_the_token_views(page):
    from playground.ui.outcome import empty_outcome
    from playground.ui.run import recolour

    outcome = empty_outcome({"columns": [{"strategy": "greedy"}]}, [0])
    outcome["results"][0] = fake_result([1, 2])
    updates = recolour(page, outcome, "entropy (as drawn)")
    assert set(updates) == {page.legend, page.columns[0].tokens}
    assert "nats" in updates[page.legend] and "class='tok'" in updates[page.columns[0].tokens]


def test_applying_settings_sets_every_column_and_its_visible_knobs(page):
    updates = page.apply_settings(SETTINGS, "applied")
    assert updates[page.visible] == [True, True, False, False]
    assert updates[page.prompt] == SETTINGS["prompt"] and updates[page.mode] == "raw"
    second = page.columns[1]
    assert updates[second.knobs["strategy"]]["value"] == "sampling"
    assert updates[second.knobs["temperature"]]["value"] == 0.7
    assert updates[second.groups["sampling_knobs"]]["visible"] is True
    assert updates[second.groups["beam_knobs"]]["visible"] is False
    assert decode_url_state(updates[page.url_token])["columns"][1]["top_p"] == 0.9


def test_a_failing_column_does_not_cost_the_others_their_run(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run

    request = type("Request", (), {"session_hash": "crash-session"})()

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        if spec.strategy == "greedy":
            raise RuntimeError("backend broke")
        yield DoneEvent(fake_result([1]))

    monkeypatch.setattr(runner, "run", fake_run)
    data = page_data(page, {page.columns[1].knobs["strategy"]: "sampling"})
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    assert any("RuntimeError: backend broke" in u.get(page.columns[0].notice, "") for u in updates)
    assert any(u.get(page.columns[1].notice, "").startswith("✓ 1 token ·") for u in updates)


def test_removing_a_column_takes_its_results_out_and_renumbers_the_rest(page):
    from playground.ui.outcome import empty_outcome
    from playground.ui.wiring import remove_column

    outcome = empty_outcome({"columns": [{"strategy": "greedy"}, {"strategy": "sampling"}, {"strategy": "beam"}]},
                            [0, 1, 2])
    for slot, ids in ((0, [1, 2]), (1, [1, 3]), (2, [4])):
        outcome["results"][slot] = fake_result(ids)
    updates = remove_column(page, [True, True, True, False], outcome, "probability (as drawn)", 0)
    remaining = updates[page.results]
    assert remaining["results"][0] is None and remaining["labels"][0] is None
    assert remaining["labels"][1:3] == ["1: sampling · dynamic", "2: beam · dynamic"]
    assert updates[page.metrics]["headers"] == ["metric", "1: sampling · dynamic", "2: beam · dynamic"]
    assert "greedy" not in updates[page.diff]
    assert updates[page.columns[1].title]["value"] == "### Column 1"
    assert updates[page.columns[2].title]["value"] == "### Column 2"
    # the plots and the cards agree on each column's number and colour once it moved up
    assert "tint-0" in updates[page.columns[1].title]["elem_classes"]
    assert "tint-1" in updates[page.columns[2].output_box]["elem_classes"]
    assert updates[page.columns[0].tokens] == "" and updates[page.columns[0].chatbot] == []  # re-added: blank
    kv = updates[page.kv_plot]["value"].dropna()
    assert set(kv["column"]) == {"col 1", "col 2"} and set(kv[kv["column"] == "col 1"]["run"]) == {
        "1: sampling · dynamic"}


def test_a_column_added_before_others_renumbers_them_and_their_results(page):
    from playground.ui.outcome import empty_outcome
    from playground.ui.wiring import add_column

    outcome = empty_outcome({"columns": [{"strategy": "sampling"}, {"strategy": "beam"}]}, [1, 2])
    outcome["results"][1], outcome["results"][2] = fake_result([1, 3]), fake_result([4])
    updates = add_column(page, [False, True, True, False], outcome, "probability (as drawn)")
    assert updates[page.visible] == [True, True, True, False]
    assert updates[page.columns[0].title]["value"] == "### Column 1"
    assert updates[page.results]["labels"][1:3] == ["2: sampling · dynamic", "3: beam · dynamic"]
    assert updates[page.metrics]["headers"] == ["metric", "2: sampling · dynamic", "3: beam · dynamic"]
    speed = updates[page.speed_plot]["value"]
    assert set(speed[speed["tokens/s"] > 0]["column"]) == {"col 2", "col 3"}


def test_run_says_how_many_columns_can_run(page):
    assert page.run_label([True, True, False, False], "", "", "", "")["value"] == "▶ Run all 2 columns"
    label = page.run_label([True, True, True, False], "", "⚠ unknown model 'x'", "", "")["value"]
    assert label == "▶ Run 2 of 3 columns (1 cannot run as set)"


def wired(demo, name: str):
    """The page's handler of that name, as Gradio calls it."""
    return next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == name)


def test_a_refusal_from_the_last_run_clears_as_soon_as_a_prompt_is_typed(demo, page):
    refused = "⚠ prompt is empty; type some text to continue"
    summary = "⚠ 0 columns ran, 2 refused or failed (column 1: prompt is empty; column 2: prompt is empty)"
    data = page_data(page, {page.prompt: "Once", page.columns[0].notice: refused, page.status: summary,
                            page.columns[1].notice: refused, page.columns[2].notice: "", page.columns[3].notice: ""})
    updates = wired(demo, "recheck")(data)
    assert updates[page.columns[0].notice] == updates[page.columns[1].notice] == ""
    assert updates[page.run]["value"] == "▶ Run all 2 columns"
    assert updates[page.status] == ""  # the summary of the refusals goes with them


def test_the_run_button_counts_the_columns_left_after_a_remove_or_an_add(demo, page):
    from playground.ui.outcome import empty_outcome

    outcome = empty_outcome()
    updates = wired(demo, "remove")([True, True, False, False], outcome, "probability (as drawn)", "", "", "", "")
    assert updates[page.run]["value"] == "▶ Run"
    add = wired(demo, "add")
    updates = add([True, True, False, False], outcome, "probability (as drawn)", "", "", "", "")
    assert updates[page.run]["value"] == "▶ Run all 3 columns"


def test_every_control_is_locked_while_columns_run(page):
    lockable = page.lockable()
    assert page.prompt in lockable and page.columns[3].knobs["temperature"] in lockable and page.run not in lockable
    assert page.stop not in lockable  # stopping stays possible


def test_stop_is_red_only_while_columns_run(demo, page):
    assert page.stop.variant == "secondary"
    assert wired(demo, "lock")()[page.stop]["variant"] == "stop"
    assert wired(demo, "unlock")()[page.stop]["variant"] == "secondary"


def test_no_glyph_the_pages_fonts_lack():
    """Debian's Chromium draws U+23F3 (hourglass) as an empty box: no installed font has it."""
    from pathlib import Path

    import playground

    for path in Path(playground.__file__).parent.rglob("*.py"):
        assert "\u23f3" not in path.read_text(), path


@pytest.mark.parametrize(("settings", "fragment"), [
    ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
    ({"model": "org/some-model"}, "cannot reach the Hugging Face hub"),
    ({"strategy": "assisted", "assistant": "/etc"}, "outside the allowed roots"),
])
def test_a_column_shows_what_would_refuse_it_before_anything_runs(settings, fragment):
    assert fragment in notice_text({"model": "smollm2-135m", **settings})


def test_a_beam_column_shows_every_returned_sequence_and_the_search_tree():
    from playground.ui.beam_view import beam_html

    node = {"parent": None, "token": 1, "text": " a", "score": -1.0, "kept": True, "finished": False, "chosen": True}
    child = {**node, "parent": 0, "text": "<b>", "score": -2.5, "chosen": False, "kept": False}
    result = {**fake_result([1, 2]), "sequences": ["best", "second"], "scores": [-1.25, -1.5],
              "beam_tree": [[node, {**node, "chosen": False, "kept": False}], [child, {**child, "chosen": True}]]}
    view = beam_html(result)
    assert "<b>-1.250</b> best" in view and "<b>-1.500</b> second" in view
    assert view.count("beam-node chosen") == 2 and view.count("beam-edge") == 2
    assert "&lt;b&gt;" in view  # token text is escaped
    assert beam_html(fake_result([1])) == ""  # not a beam run: nothing drawn


def test_applied_settings_keep_the_values_of_knobs_that_are_their_own_group(page):
    columns = [{"strategy": "assisted", "prompt_lookup": 3}, {"strategy": "greedy", "cache": "sink", "sink_tokens": 2}]
    updates = page.apply_settings(page_settings("p", 0, "auto", columns), "applied")
    lookup = updates[page.columns[0].knobs["prompt_lookup"]]
    assert lookup["value"] == 3 and lookup["visible"] is True
    assert updates[page.columns[1].knobs["sink_tokens"]]["value"] == 2


def test_the_beam_tree_leaves_out_beams_no_hypothesis_can_reach():
    """A constraint that allows fewer continuations than beams keeps some beams running at transformers' start
    score (-1e9); they and what descends from them are not hypotheses, and the rest keep their parents' rows."""
    from playground.ui.beam_view import _possible

    def node(parent, text, score, kept=True, chosen=False):
        return {"parent": parent, "token": 0, "text": text, "score": score, "kept": kept, "finished": False,
                "chosen": chosen}

    steps = [[node(None, "{", -3.3, chosen=True), node(None, "{", -1e9 - 3.3)],
             [node(1, "x", -1e9 - 4.0), node(0, '"', -3.7, chosen=True), node(0, " ", -5.1, kept=False)],
             [node(0, "y", -1e9 - 5.0), node(1, "n", -3.8, chosen=True)]]
    shown = _possible(steps)
    assert [[n["text"] for n, _ in step] for step in shown] == [["{"], ['"', " "], ["n"]]
    assert [[parent for _, parent in step] for step in shown] == [[None], [0, 0], [0]]


def test_a_compile_reported_at_zero_shows_what_it_is_doing_and_for_how_long_not_a_percentage():
    from playground.ui.run import progress_shown

    compiling = ProgressEvent(0.0, "torch.compile (default): compiling the decode step for 160 cache positions",
                              elapsed_s=138.4)
    fraction, desc, mark = progress_shown(compiling, stopping=False)
    assert fraction is None and mark == "◔"  # no bar stuck at "0.0%" for minutes
    assert desc == "torch.compile (default): compiling the decode step for 160 cache positions · 138 s"
    assert progress_shown(ProgressEvent(0.4, "loading weights", elapsed_s=3.0), stopping=False)[0] == 0.4
    assert progress_shown(compiling, stopping=True)[1].startswith("stops once this ends: torch.compile")


def test_chain_knobs_sit_two_to_a_row_only_where_the_card_is_wide_enough():
    """A row's widgets wrap under each other below their minimum width: three columns on a 1400 px screen gave
    the "more samplers" help ten lines per knob at half a card's width."""
    from playground import registry
    from playground.ui.knob_widgets import WIDGET_MIN_WIDTH, knob_widget

    widget = knob_widget(registry.knob("typical_p"), 0, 1.0)
    assert widget.min_width == WIDGET_MIN_WIDTH >= 240

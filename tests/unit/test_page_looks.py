"""How the page shows things: chat replies once, one palette for cards, lines and bars, the run shortcut's hint."""

from __future__ import annotations

import math

import pytest

from playground.events import DoneEvent
from playground.ui.export import page_settings, parse_settings
from playground.ui.plots import HEADROOM, PALETTE, series_colours, value_limits
from playground.ui.style import CSS, METRICS_SCROLL_CSS, RUN_SHORTCUT
from playground.ui.table import scroll_cue
from tests.unit.page_fakes import fake_result, page_data


@pytest.fixture(scope="module")
def page():
    from playground.ui.wiring import build_ui

    return build_ui()[1]  # (the Blocks, its Page)


def _settings(mode: str) -> dict:
    return parse_settings(page_settings("hi", 0, mode, [{"strategy": "greedy"}, {"strategy": "greedy"}]))


def test_chat_mode_shows_each_reply_once_in_the_transcript(page):
    chat = page.apply_settings(_settings("chat"))
    for col in page.columns:
        assert chat[col.chatbot]["visible"] is True
        assert chat[col.output]["visible"] == "hidden"  # still in the page for scripts, not shown twice
    assert chat[page.columns[1].output]["label"] == "column 2 output"  # merged with the layout's update
    single = page.apply_settings(_settings("auto"))
    assert single[page.columns[0].output]["visible"] is True and single[page.columns[0].chatbot]["visible"] is False
    assert page.chat_visibility("chat")[page.columns[3].output]["visible"] == "hidden"  # the mode toggle too


def test_each_column_has_one_colour_on_its_card_its_lines_and_its_bars(page):
    assert page.speed_plot.color == page.latency_plot.color == page.kv_plot.color == "column"
    for plot in (page.speed_plot, page.latency_plot, page.kv_plot):
        assert plot.color_map == series_colours(len(page.columns))
        assert plot.colors_in_legend == []  # no legend for columns that have not run
    for position, colour in enumerate(PALETTE):
        assert f".tint-{position} h3::before {{ content: '●  '; color: {colour}; }}" in CSS
        assert f".out-card.tint-{position} {{ border-top: 3px solid {colour};" in CSS
    assert page.latency_plot.x_axis_format == page.kv_plot.x_axis_format == "d"  # whole steps


def test_the_prompt_says_how_to_run_from_the_keyboard(page):
    assert RUN_SHORTCUT in page.prompt.info and "Ctrl+Enter" in RUN_SHORTCUT


def test_the_speed_and_kv_axes_reach_past_the_tallest_bar_and_the_highest_line():
    """From 0 to the largest value exactly, the tallest bar was cut at the plot's top and a cache flat at
    its full size from the first step (JAX's static cache) was drawn on the border."""
    assert value_limits([12.0, 30.0, 0.0, math.nan]) == [0.0, pytest.approx(30.0 * HEADROOM)]
    flat = [3.0] * 20
    assert value_limits(flat)[1] > max(flat) * 1.05  # a flat line at the maximum sits inside the plot
    assert value_limits([]) == value_limits([math.nan, 0.0]) == [0.0, None]  # nothing drawn: left to the plot


def test_a_run_sends_the_plots_their_headroom_after_their_data_never_with_it(page, monkeypatch):
    """Gradio sets an update's value after its other properties and redraws for new limits from the data the plot
    holds: limits sent with the data redrew the old data and lost the new. So the limits follow in an update of
    their own, and every plot's data is an update too (a run's later updates are diffs Gradio applies in place to
    the last one sent: a bare frame would be the plot's own data, emptied by the limits that follow)."""
    from playground import runner
    from playground.ui import run as ui_run

    speeds = iter([12.0, 30.0])

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        result = fake_result([1, 2], speed=next(speeds), strategy=spec.strategy)
        result["timeline"] = {**result["timeline"], "kv_cache_bytes": [3 * 2**20, 3 * 2**20]}  # flat, as static
        yield DoneEvent(result)

    monkeypatch.setattr(runner, "run", fake_run)
    data = page_data(page, {page.columns[1].knobs["strategy"]: "sampling"})
    request = type("Request", (), {"session_hash": "headroom-session"})()
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    plots = (page.speed_plot, page.kv_plot)
    drawn = [i for i, u in enumerate(updates) if page.speed_plot in u and "value" in u[page.speed_plot]]
    limited = [i for i, u in enumerate(updates) if page.speed_plot in u and "y_lim" in u[page.speed_plot]]
    *after_data, closing = limited
    assert len(after_data) == 2 and all(i - 1 in drawn for i in after_data)  # after each column's data, at once
    assert page.status in updates[closing] and closing == len(updates) - 1  # and once more as the run closes
    assert updates[closing][page.speed_plot]["y_lim"] == updates[after_data[-1]][page.speed_plot]["y_lim"]
    for i in limited:
        assert all(set(updates[i][plot]) == {"__type__", "y_lim"} for plot in plots)  # limits alone, never data
    for i in drawn:
        assert all(updates[i][plot].get("__type__") == "update" for plot in (*plots, page.latency_plot))
    final = updates[limited[-1]]
    assert final[page.speed_plot]["y_lim"] == [0.0, pytest.approx(30.0 * HEADROOM)]
    assert final[page.kv_plot]["y_lim"] == [0.0, pytest.approx(3.0 * HEADROOM)]


def test_the_metrics_table_says_it_scrolls_sideways_only_while_it_overflows():
    """On a phone the table showed column 1 with no cue that more columns lay to its right. The cue is
    CSS driven by the table's own scroll position, so it shows only while the table is wider than its box."""
    assert scroll_cue(2) == "← scroll sideways for both columns →"
    assert scroll_cue(4) == "← scroll sideways for all 4 columns →"
    assert "scroll-timeline: --metrics-x x" in METRICS_SCROLL_CSS and "timeline-scope: --metrics-x" in CSS
    for count in (2, 3, 4):  # the line names the columns the header holds (none before a run, with one)
        assert f'#metrics:has(thead th:nth-child({count + 1})) {{ --metrics-cue: "{scroll_cue(count)}"; }}' in CSS
    assert "var(--metrics-cue" not in METRICS_SCROLL_CSS.split("@keyframes metrics-cue")[1]  # kept as it started
    assert "@supports" not in METRICS_SCROLL_CSS and "@property" not in METRICS_SCROLL_CSS  # Gradio drops them

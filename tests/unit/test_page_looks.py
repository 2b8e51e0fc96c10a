"""How the page shows things: chat replies once, one palette for cards, lines and bars, the run shortcut's hint."""

from __future__ import annotations

import pytest

from playground.ui.export import page_settings, parse_settings
from playground.ui.plots import PALETTE, series_colours
from playground.ui.style import CSS, RUN_SHORTCUT


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

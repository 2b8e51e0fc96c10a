"""The sweep tab in a real browser: a sentence before any sweep, a preset fills the tab, the sweep runs, every
plot the knob can move has one point per value and its axis title whole, the finish's axis limits keep its data,
and clicking a point opens that row's tokens.

Screenshots (before a sweep; after one in light, dark and on a 390 px wide phone) go to $PLAYGROUND_SHOTS when it
is set.
"""

from __future__ import annotations

import re

import pytest

from playground.sweep.presets import SWEEP_PRESETS
from playground.ui.sweep_frames import MEASURES, shown
from tests.integration.test_browser import _open, _set_slider
from tests.integration.test_browser_mechanics import _shoot

pytestmark = pytest.mark.slow
PRESET = "Sliding window on a long output"
LINE_PLOTS = len(MEASURES)  # sweep-plot-0 ... LINE_PLOTS - 1 are curves, sweep-plot-LINE_PLOTS the scatter
NEW = 24  # new tokens per run
AGREEMENT = next(i for i, m in enumerate(MEASURES) if m.key == "agreement")


def _marks(page, plot: int) -> list[str]:
    """Vega's descriptions of a plot's marks (a point's fields, "window: 64; ...; series: median")."""
    return page.eval_on_selector_all(f"#sweep-plot-{plot} svg path[role='graphics-symbol']",
                                     "marks => marks.map(m => m.getAttribute('aria-label') || '')")


def _table_cell(page, first: str, column: str) -> list:
    """The medians table's cell in the row that starts with `first`, under the header `column` (and, for a
    failure's message, the headers and rows)."""
    return page.evaluate("""([first, column]) => {
      const heads = [...document.querySelectorAll('#sweep-table [role=columnheader]')]
        .map(h => h.innerText.trim());
      const rows = [...document.querySelectorAll('#sweep-table [role=row]')]
        .map(r => [...r.querySelectorAll('[role=gridcell]')].map(c => c.innerText.trim()));
      const row = rows.find(cells => cells[0] === first);
      return row ? [row[heads.findIndex(h => h.startsWith(column))], heads, rows] : [null, heads, rows];
    }""", [first, column])


def _visible_point(page, plot: int, values: list[int]) -> tuple[int, float, float]:
    """The first of `values` whose point in the plot is the topmost element at its own centre, with that centre."""
    found = page.evaluate("""([plot, values]) => {
      const marks = [...document.querySelectorAll(`#sweep-plot-${plot} svg path[role='graphics-symbol']`)];
      for (const value of values) {
        const mark = marks.find(m => (m.getAttribute('aria-label') || '').includes(`window: ${value};`));
        if (!mark) continue;
        window.scrollBy(0, mark.getBoundingClientRect().top - window.innerHeight / 2);  // the page only
        const box = mark.getBoundingClientRect();
        const [x, y] = [box.x + box.width / 2, box.y + box.height / 2];
        if (document.elementFromPoint(x, y) === mark) return [value, x, y];
      }
      return null;
    }""", [plot, values])
    assert found, _marks(page, plot)
    return found[0], found[1], found[2]


def _y_title(page, plot: int) -> str | None:
    """The text Vega drew as a plot's y-axis title (it ends in "…" where Vega cut it to fit)."""
    return page.evaluate("""(plot) => {
      const title = document.querySelector(`#sweep-plot-${plot} [aria-label^="Y-axis"] .role-axis-title text`);
      return title ? title.textContent : null;
    }""", plot)


def _below_the_top(page, plot: int, field: str) -> float:
    """How far below the top of the plot's frame the centre of the median mark whose description has `field`
    is drawn, in px: 0 where the y axis ends at that mark's value, more where the axis reaches past it."""
    return page.evaluate("""([plot, field]) => {
      const root = document.querySelector(`#sweep-plot-${plot}`);
      const mark = [...root.querySelectorAll("svg path[role='graphics-symbol']")]
        .find(m => (m.getAttribute('aria-label') || '').includes(field)
                   && (m.getAttribute('aria-label') || '').includes('series: median'));
      const frame = root.querySelector('svg .role-frame > g > path.background').getBoundingClientRect();
      const box = mark.getBoundingClientRect();
      return box.y + box.height / 2 - frame.y;
    }""", [plot, field])


def test_a_preset_sweep_draws_a_point_per_value_and_a_click_opens_its_row(app_url, browser):
    page, errors = _open(browser, app_url)
    page.get_by_role("tab", name="Sweep a knob").click()
    # before any sweep: a sentence where the plots will be, no empty axes and no table headed "1 2 3"
    page.wait_for_selector("#sweep-empty", state="visible", timeout=30_000)
    assert page.locator("#sweep-empty").inner_text().startswith("Run a sweep to see")
    assert not page.locator("#sweep-plot-0").is_visible() and not page.locator("#sweep-table").is_visible()
    _shoot(page, "sweep-empty")
    page.locator("#sweep-preset-1").click()  # the window preset: 16 to 256 on a long output
    page.wait_for_function("() => document.querySelector('#sweep-preset-note')?.innerText.includes('window')",
                           timeout=30_000)
    values = [int(v) for v in SWEEP_PRESETS[PRESET].values.split(",")]
    assert page.locator("#sweep-values textarea, #sweep-values input").first.input_value() == ",".join(map(str, values))
    assert "window sets an array shape" in page.locator("#sweep-compile-note").inner_text()
    # the preset as it is, on PyTorch (no compiles to wait for) and one prompt of 24 tokens, to keep the test short
    page.locator("#sweep-backend").get_by_label("torch").check()
    _set_slider(page, "sweep-prompt-count", 1)
    page.locator("#sweep-max-new-tokens input").fill(str(NEW))
    page.locator("#sweep-run").click()
    page.wait_for_function("() => /sweep done/.test(document.querySelector('#sweep-status')?.innerText || '')",
                           timeout=240_000)
    assert f"{len(values)} rows over {len(values)} values of window" in page.locator("#sweep-status").inner_text()

    assert not page.locator("#sweep-empty").is_visible()
    # a window moves the KV cache but not the tokens a pass makes (greedy) nor the overlap of several returned
    # sequences (greedy returns one): those curves would be flat or empty, so they are hidden
    drawn = [i for i, show in enumerate(shown("window", "greedy")) if show]
    assert drawn == [i for i in range(LINE_PLOTS) if MEASURES[i].key not in ("tokens_per_pass", "returned_overlap")]
    assert not page.locator(f"#sweep-plot-{LINE_PLOTS - 1}").is_visible()
    for plot in drawn:
        medians = {re.match(r"window: ([\d,]+)", m).group(1).replace(",", "") for m in _marks(page, plot)
                   if "series: median" in m and m.startswith("window:")}
        assert sorted(int(v) for v in medians) == values, (plot, _marks(page, plot))
        assert _y_title(page, plot) == MEASURES[plot].title  # drawn whole, not cut to "agreement with gr…"
    # the finish's limits arrive after its data and redraw each plot: the axis now reaches past the highest
    # agreement (1.0, at the widest window) instead of ending at it, and every value's point is still there
    assert _below_the_top(page, AGREEMENT, f"window: {values[-1]};") > 3
    points = [m for m in _marks(page, LINE_PLOTS) if "row:" in m]
    assert len(points) == len(values)
    # the widest window holds the prompt and all the new tokens: it agrees with full attention on every token
    cell, heads, rows = _table_cell(page, "256", "agreed prefix")
    assert cell == "1", (heads, rows)

    # a user clicks a point they can see: one whose centre is not under another point (two values of similar
    # speed and agreement can overlap), the narrowest window first
    window, x, y = _visible_point(page, LINE_PLOTS, values)
    page.mouse.click(x, y)
    page.wait_for_function(f"() => document.querySelector('#sweep-tokens')?.innerText.includes('window={window} ')",
                           timeout=30_000)
    assert 0 < page.locator("#sweep-tokens .tok").count() <= NEW  # a narrow window may end early at EOS
    assert page.locator("#sweep-download-json").is_enabled()
    _shoot(page, "sweep-light")
    page.emulate_media(color_scheme="dark")
    # the plots were drawn in light colours; switched to dark with the page open, their text follows the theme
    page.wait_for_function("() => document.querySelector('.dark') !== null", timeout=30_000)
    label, theme = page.evaluate("""() => {
      const probe = document.createElement('span');
      probe.style.color = 'var(--body-text-color)';
      document.querySelector('#sweep-plot-0').appendChild(probe);
      const theme = getComputedStyle(probe).color;
      probe.remove();
      return [getComputedStyle(document.querySelector('#sweep-plot-0 .role-axis-label text')).fill, theme];
    }""")
    assert label == theme
    _shoot(page, "sweep-dark")
    page.set_viewport_size({"width": 390, "height": 900})
    _shoot(page, "sweep-phone")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390 + 1
    assert not errors

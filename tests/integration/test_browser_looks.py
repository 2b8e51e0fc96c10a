"""The page in a real browser, after a run: Ctrl+Enter runs it, dark mode is readable, a phone needs no sideways scroll.

Same requirements as test_browser.py (Debian's chromium and playwright). The contrast check is
contrast.js: every visible text against its effective background, by the WCAG formula.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from playground.ui.table import scroll_cue
from tests.integration.test_browser import _set_slider

pytestmark = pytest.mark.slow
CONTRAST_JS = (Path(__file__).parent / "contrast.js").read_text()
PHONE = {"width": 390, "height": 844}
RAN = "() => document.querySelector('#status')?.innerText.includes('✓ 2 columns ran')"
# How far below the top of its plotting area the highest bar or line of the speed and KV plots is drawn (px), and
# how many bars or lines there are: an axis that ends at the largest value draws it on the border
PLOT_ROOM_JS = """() => Object.fromEntries(['speed-plot', 'kv-plot'].map(id => {
    const svg = document.querySelector(`#${id} svg`);
    const top = svg.querySelector('.role-frame path.background').getBoundingClientRect().top;
    const boxes = (selector) => [...svg.querySelectorAll(selector)].map(p => p.getBoundingClientRect());
    const marks = [...boxes('.mark-rect path').filter(r => r.height > 0),  // not the empty positions' zeros
                   ...boxes('.mark-line path').filter(r => r.width > 0)];
    return [id, {room: Math.min(...marks.map(r => r.top)) - top, marks: marks.length}];
}))"""
# The metrics table at its start and, scrolled all the way sideways, at its end: the element that scrolls (its
# overflow, widths, and whether the last column's head then lies within it), the fade on its edges and the line
# over the table (a pseudo-element of an element in #metrics: its text, opacity and height)
TABLE_SCROLL_JS = """async () => {
    const box = document.querySelector('#metrics');
    const scroller = [...box.querySelectorAll('*')].find(
        e => e.scrollWidth > e.clientWidth + 1 && ['auto', 'scroll'].includes(getComputedStyle(e).overflowX));
    const cue = () => {
        for (const e of box.querySelectorAll('*')) {
            for (const pseudo of ['::before', '::after']) {
                const style = getComputedStyle(e, pseudo);
                if (style.content.includes('scroll')) {
                    return {text: style.content, opacity: style.opacity, height: style.maxHeight,
                            display: style.display};
                }
            }
        }
        return null;
    };
    const frame = () => new Promise(resolve => requestAnimationFrame(() => requestAnimationFrame(resolve)));
    if (!scroller) { return {scrolls: false, width: box.getBoundingClientRect().width, cue: cue()}; }
    const start = {cue: cue(), mask: getComputedStyle(scroller).maskImage};
    scroller.scrollLeft = scroller.scrollWidth;
    await frame();
    const heads = [...box.querySelectorAll('thead th')];
    const last = heads[heads.length - 1].getBoundingClientRect(), view = scroller.getBoundingClientRect();
    const end = {cue: cue(), mask: getComputedStyle(scroller).maskImage,
                 lastColumnInView: last.left >= view.left - 1 && last.right <= view.right + 1};
    scroller.scrollLeft = 0;
    await frame();
    return {scrolls: true, overflowX: getComputedStyle(scroller).overflowX, width: box.getBoundingClientRect().width,
            scrollWidth: scroller.scrollWidth, clientWidth: scroller.clientWidth, columns: heads.length - 1,
            start, end};
}"""


def _short_columns(page, tokens: int = 8) -> None:
    for column in (0, 1):
        _set_slider(page, f"max_new_tokens-{column}", tokens)


@pytest.fixture(scope="module")
def dark_run(app_url, browser) -> Iterator[dict]:
    """The start page in dark mode, run with Ctrl+Enter from the prompt; what was seen while it ran."""
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(app_url + "?__theme=dark")
    page.wait_for_selector("#run", timeout=30_000)
    _short_columns(page)
    page.locator("#prompt textarea").click()
    page.keyboard.press("Control+Enter")
    page.wait_for_function("() => document.querySelector('#preset-0')?.disabled", timeout=30_000)
    seen = {"presets_locked": page.locator("#preset-1").is_disabled()}
    page.wait_for_function(RAN, timeout=300_000)
    page.wait_for_timeout(1000)  # the plots draw after the last update
    # colours are read once every transition has ended: on a busy machine the download buttons were still
    # fading from disabled to enabled after that second, and a colour halfway read as too little contrast
    page.wait_for_function("() => !document.querySelector('#download-json').disabled", timeout=30_000)
    page.wait_for_function("() => document.getAnimations().every(a => !(a instanceof CSSTransition)"
                           " || a.playState !== 'running')", timeout=30_000)
    yield {"page": page, "errors": errors, **seen}
    page.close()


def test_ctrl_enter_in_the_prompt_runs_all_columns_and_the_hint_says_so(dark_run):
    page = dark_run["page"]
    assert "Ctrl+Enter" in page.locator("#prompt").inner_text()  # the hint, next to the prompt
    assert dark_run["presets_locked"]  # no preset can land on the running columns
    for column in (0, 1):
        assert page.locator(f"#output-{column} textarea").input_value().strip()
    assert not page.locator("#preset-1").is_disabled()  # unlocked once the run ended
    assert not dark_run["errors"], dark_run["errors"]


def test_in_dark_mode_every_text_has_at_least_4_5_to_1_contrast(dark_run):
    page = dark_run["page"]
    assert page.evaluate("document.body.classList.contains('dark')")
    texts = page.evaluate(CONTRAST_JS)
    low = [t for t in texts if t["ratio"] < 4.5]
    assert not low, low
    covered = {t["text"] for t in texts} | {t["id"] for t in texts}
    # what failed before: plain tokens and legend labels, the table, the status line, the plots' labels
    assert {"accepted draft", "first divergence", "metrics", "status", "kv-plot"} <= covered, covered
    assert sum(1 for t in texts if t.get("token")) >= 10  # the token views and the legend were measured
    assert "rejected draft" in covered  # the legend's struck-through sample, measured with its opacity


def test_the_tallest_bar_and_the_highest_kv_line_are_drawn_below_the_top_of_their_plots(dark_run):
    """An axis that ended at the largest value cut the tallest bar at the plot's top edge and laid a KV line at
    its maximum on the border; and limits sent with new data lost the data (both bars must show)."""
    settled = f"() => Object.values(({PLOT_ROOM_JS})()).every(p => p.room >= 5 && p.marks == 2)"
    # the last updates may still be on their way, and a redraw under way, on a busy machine (a full-suite run
    # once saw one mark per plot after 20 s); the assertions below say what was seen
    try:
        dark_run["page"].wait_for_function(settled, timeout=60_000)
    except PlaywrightTimeout:
        pass
    plots = dark_run["page"].evaluate(PLOT_ROOM_JS)
    assert plots["speed-plot"]["marks"] == 2 and plots["kv-plot"]["marks"] == 2, plots  # the two columns' data
    assert all(plot["room"] >= 5 for plot in plots.values()), plots


def test_a_metrics_table_that_fits_its_box_shows_no_scroll_cue(dark_run):
    table = dark_run["page"].evaluate(TABLE_SCROLL_JS)
    assert not table["scrolls"], table  # 1440 px: both columns in view
    cue = table["cue"]
    assert cue is None or (cue["opacity"] == "0" and cue["height"] == "0px"), table  # and nothing said


@pytest.fixture(scope="module")
def phone_run(app_url, browser) -> Iterator[Any]:
    """The start page on a 390 px phone, its two columns run (6 tokens each) with a tap on Run."""
    context = browser.new_context(viewport=PHONE, has_touch=True, is_mobile=True)
    page = context.new_page()
    page.goto(app_url)
    page.wait_for_selector("#run", timeout=30_000)
    _short_columns(page, 6)
    page.locator("#run").tap()
    page.wait_for_function(RAN, timeout=300_000)
    page.wait_for_timeout(1000)
    yield page
    context.close()


def test_on_a_phone_every_metrics_column_can_be_reached_and_the_table_says_how(phone_run):
    """At 390 px the table showed column 1 only, with no cue that a second one lay to its right (and its
    stars nothing to compare against). It scrolls sideways inside itself, its right edge fades while columns lie
    behind it, and a line over it names the columns; scrolled to the end, the last column is in view and the fade
    moves to the left edge."""
    table = phone_run.evaluate(TABLE_SCROLL_JS)
    assert table["scrolls"] and table["overflowX"] in ("auto", "scroll"), table
    assert table["scrollWidth"] > table["clientWidth"] and table["width"] <= PHONE["width"], table
    assert table["columns"] == 2, table
    start, end = table["start"], table["end"]
    assert start["cue"] == {"text": f'"{scroll_cue(2)}"', "opacity": "1", "height": start["cue"]["height"],
                            "display": "block"} and start["cue"]["height"] != "0px", start
    assert start["mask"].startswith("linear-gradient(to right, rgb(0, 0, 0)"), start  # opaque left, faded right
    assert end["lastColumnInView"], end
    assert end["cue"] == start["cue"], end  # still there to say the table scrolls
    assert end["mask"].startswith("linear-gradient(to right, rgba(0, 0, 0, 0)"), end  # faded left, opaque right


def test_on_a_phone_nothing_scrolls_sideways_and_each_output_sits_with_its_settings(phone_run):
    page = phone_run
    assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
    table = page.evaluate(TABLE_SCROLL_JS)
    assert table["width"] <= PHONE["width"] and table["scrolls"], table  # the table scrolls inside itself
    tops = page.evaluate("""() => [0, 1].map(i => ['run-card', 'out-card'].map(
        kind => document.querySelector(`.${kind}.card-${i}`).getBoundingClientRect().top))""")
    (settings_1, output_1), (settings_2, output_2) = tops
    assert settings_1 < output_1 < settings_2 < output_2  # settings, its output, next settings, its output
    # every plot's text (axis labels, legend entries such as "col 2") lies inside what shows it: its SVG, or its
    # block where the SVG lets text overflow; none is cut at an edge
    cut = page.evaluate("""() => ['speed-plot', 'latency-plot', 'kv-plot'].flatMap(id => {
        const svg = document.querySelector(`#${id} svg`);
        const frame = getComputedStyle(svg).overflow === 'visible' ? document.getElementById(id) : svg;
        const block = frame.getBoundingClientRect();
        return [...svg.querySelectorAll('text')].filter(t => t.textContent.trim()).map(t => {
            const r = t.getBoundingClientRect();
            const outside = r.left < block.left - 0.5 || r.right > block.right + 0.5;
            return r.width > 0 && outside ? `${id}: ${t.textContent}` : null;
        }).filter(Boolean);
    })""")
    assert not cut, cut
    token = page.locator("#tokens-1 .tok").nth(1)
    token.scroll_into_view_if_needed()
    token.tap()  # no hover on a phone: a tap opens the token's sampling cut, its alternatives charted
    page.wait_for_selector("#sampling-cut .cut-row", timeout=30_000)
    page.wait_for_timeout(800)  # the cut scrolls into view
    # no panel of the tapped token's own is left over the cut: the token does not keep the focus
    assert page.evaluate("() => !document.activeElement?.matches('.tok')")
    box = page.locator("#sampling-cut").bounding_box()
    assert box is not None and box["y"] < PHONE["height"] and box["y"] + box["height"] > 0  # on screen

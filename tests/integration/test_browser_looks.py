"""The page in a real browser, after a run: Ctrl+Enter runs it, dark mode is readable, a phone needs no sideways scroll.

Same requirements as test_browser.py (Debian's chromium and playwright). The contrast check is
contrast.js: every visible text against its effective background, by the WCAG formula.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_browser import _set_slider

pytestmark = pytest.mark.slow
CONTRAST_JS = (Path(__file__).parent / "contrast.js").read_text()
PHONE = {"width": 390, "height": 844}
RAN = "() => document.querySelector('#status')?.innerText.includes('✓ 2 columns ran')"


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


def test_on_a_phone_nothing_scrolls_sideways_and_each_output_sits_with_its_settings(app_url, browser):
    context = browser.new_context(viewport=PHONE, has_touch=True, is_mobile=True)
    page = context.new_page()
    page.goto(app_url)
    page.wait_for_selector("#run", timeout=30_000)
    _short_columns(page, 6)
    page.locator("#run").tap()
    page.wait_for_function(RAN, timeout=300_000)
    page.wait_for_timeout(1000)
    assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
    table = page.evaluate("""() => {
        const box = document.querySelector('#metrics');
        const inner = [...box.querySelectorAll('*')].find(e => e.scrollWidth > e.clientWidth + 1
                                                          && getComputedStyle(e).overflowX !== 'visible');
        return {width: box.getBoundingClientRect().width, scrolls: Boolean(inner)};
    }""")
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
    page.wait_for_selector("#sampling-cut .cut-row", timeout=10_000)
    page.wait_for_timeout(800)  # the cut scrolls into view
    # no panel of the tapped token's own is left over the cut: the token does not keep the focus
    assert page.evaluate("() => !document.activeElement?.matches('.tok')")
    box = page.locator("#sampling-cut").bounding_box()
    assert box is not None and box["y"] < PHONE["height"] and box["y"] + box["height"] > 0  # on screen
    context.close()

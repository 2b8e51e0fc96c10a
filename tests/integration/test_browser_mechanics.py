"""The page's views of decoding mechanics in a real browser: a sliding-window column's cache strip and its step
slider, and an assisted column's drafted/accepted strip with rejected drafts struck through.

Screenshots (light, dark and a 390 px wide phone) go to $PLAYGROUND_SHOTS when it is set.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from playground.ui.export import encode_url_state, page_settings
from tests.integration.test_browser import _open, _set_slider
from tests.integration.test_browser_looks import PLOT_ROOM_JS

pytestmark = pytest.mark.slow
PROMPT = "Repeat this line twice: the cat sat on the mat, the dog sat on the log."
WINDOW = 32
NEW = 24


def _evicted(page, column: int) -> int:
    """How many evicted positions the strip's summary reports."""
    found = re.search(r"(\d+) evicted", page.locator(f"#cache-strip-{column}").inner_text())
    return int(found.group(1)) if found else 0


def _shoot(page, name: str) -> None:
    folder = os.environ.get("PLAYGROUND_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def _open_and_run(chromium, address: str, columns: list[dict]):
    """Open the page on a share link holding these columns and PROMPT, and press Run once it is restored."""
    page, errors = _open(chromium, f"{address}?s={encode_url_state(page_settings(PROMPT, 0, 'auto', columns))}")
    page.wait_for_function(f"() => document.querySelector('#prompt textarea')?.value === {PROMPT!r}",
                           timeout=30_000)
    page.locator("#run").click()
    return page, errors


def test_a_sliding_strip_follows_its_slider_assisted_steps_are_drawn_on_both_backends_and_a_beam_shows_text(
        app_url, browser):
    """One run of four columns (one page and one run, where two tests each loaded and ran their own): a sliding
    window's cache strip follows its step slider; an assisted column's verify passes are drawn, with rejected
    drafts struck through, on PyTorch and on JAX alike; a beam column shows the leading beam's text while it
    searches; and every column's KV line is drawn below the plot's top edge."""
    columns = [{"strategy": "greedy", "cache": "sliding", "window": WINDOW, "max_new_tokens": NEW},
               {"strategy": "assisted", "cache": "dynamic", "prompt_lookup": 3, "max_new_tokens": NEW},
               {"strategy": "assisted", "backend": "jax", "cache": "static", "prompt_lookup": 3,
                "max_new_tokens": NEW},
               # 32 steps, none of them an early stop: the search is still running when its first text shows
               {"strategy": "beam", "num_beams": 4, "max_new_tokens": 32, "min_new_tokens": 32}]
    page, errors = _open_and_run(browser, app_url, columns)
    # while the search runs (the last column): the leading beam's text, and the card saying it may still change
    page.wait_for_function("() => document.querySelector('#notice-3')?.innerText.includes('leading beam')",
                           timeout=300_000)
    assert page.locator("#output-3 textarea").input_value().strip()
    assert "ran" not in page.locator("#status").inner_text()  # before the search finished
    page.wait_for_function("() => document.querySelector('#status')?.innerText.includes('✓ 4 columns ran')",
                           timeout=300_000)

    # every column's KV line, the highest below the plot's top edge, not on it (a JAX static cache, flat at its
    # full size from the first step, lay on the border when it was the largest); the plots draw after the last
    # update, so this waits for them (a wait for the condition; the assertion says what was seen)
    settled = f"() => {{ const kv = ({PLOT_ROOM_JS})()['kv-plot']; return kv.marks == 4 && kv.room >= 5; }}"
    try:
        page.wait_for_function(settled, timeout=60_000)
    except PlaywrightTimeout:
        pass
    kv = page.evaluate(PLOT_ROOM_JS)["kv-plot"]
    assert kv["marks"] == 4 and kv["room"] >= 5, kv

    strip = page.locator("#cache-strip-0")
    strip.wait_for(state="visible", timeout=30_000)
    assert f"step {NEW} of {NEW}" in strip.inner_text()
    assert page.locator("#cache-strip-0 .cache-evicted").count() > 0
    assert re.search(rf"holds {WINDOW - 1} of \d+", strip.inner_text())  # the window's W-1 stored keys
    at_end = _evicted(page, 0)
    _shoot(page, "mechanics-light")

    _set_slider(page, "cache-step-0", 1)
    page.wait_for_function("() => document.querySelector('#cache-strip-0')?.innerText.includes('step 1 of')",
                           timeout=30_000)
    assert _evicted(page, 0) == at_end - (NEW - 1)  # each step evicts one more position once the window is full
    assert not page.locator("#cache-strip-1").is_visible()  # a dynamic cache keeps everything: no strip

    assert "prompt lookup n=3" in page.locator("#diff").inner_text()  # the linked n, not the knob's default
    bars = page.locator("#tokens-1 .assist-bar")
    assert bars.count() > 0 and "drafted tokens accepted" in page.locator("#tokens-1 .assist-note").inner_text()
    assert page.locator("#tokens-1 .tok.draft").count() > 0  # prompt lookup drafts the repeated line
    assert page.locator("#tokens-1 .tok[style*='background']").count() > 0  # coloured by probability, as on JAX

    bars = page.locator("#tokens-2 .assist-bar")  # the JAX column: one bar per verify pass, as on PyTorch
    assert bars.count() > 1 and "drafted tokens accepted" in page.locator("#tokens-2 .assist-note").inner_text()
    assert page.locator("#tokens-2 .tok.draft").count() > 0
    assert page.locator("#tokens-2 .tok[style*='background']").count() > 0  # coloured by probability
    assert not errors, errors
    _shoot(page, "jax-assisted-beam-light")

    page.emulate_media(color_scheme="dark")
    _shoot(page, "mechanics-dark")
    page.set_viewport_size({"width": 390, "height": 900})
    _shoot(page, "mechanics-phone")


def test_chat_mode_shows_each_reply_once_through_links_removals_and_additions(app_url, browser):
    """A link in chat mode hides the plain output boxes (the transcript shows each reply); removing and adding
    columns keeps them hidden, renumbers cards and legends alike, and a re-added column starts blank."""
    columns = [{"strategy": "greedy", "max_new_tokens": 6}, {"strategy": "sampling", "max_new_tokens": 6}]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{app_url}?s={encode_url_state(page_settings('Hi there', 0, 'chat', columns))}")
    page.wait_for_selector("#run", timeout=30_000)
    page.wait_for_function("() => document.querySelector('#status')?.innerText.includes('restored')")

    def shown(column: int) -> tuple[bool, bool]:
        return page.locator(f"#output-{column}").is_visible(), page.locator(f"#chat-{column}").is_visible()

    def chat_only() -> None:
        """Wait, with Playwright's own idea of visible, until each column shows its transcript and not its box."""
        for column in (0, 1):
            expect(page.locator(f"#output-{column}")).to_be_hidden(timeout=30_000)
            expect(page.locator(f"#chat-{column}")).to_be_visible(timeout=30_000)
        assert shown(0) == shown(1) == (False, True)

    chat_only()  # the restore's visibility updates land after its status line
    page.locator("#run").click()
    page.wait_for_function("() => document.querySelector('#status')?.innerText.includes('2 columns ran')",
                           timeout=300_000)
    page.locator("#remove-0").click()
    page.wait_for_function("() => document.querySelector('#kv-plot')?.innerText.includes('col 1')"
                           " && !document.querySelector('#kv-plot').innerText.includes('col 2')")
    assert shown(1) == (False, True)
    titles = [t.inner_text() for t in page.locator(".card-title h3").all() if t.is_visible()]
    assert titles == ["Column 1"]
    page.locator("#add-column").click()
    chat_only()
    assert [t.inner_text() for t in page.locator(".card-title h3").all() if t.is_visible()] == ["Column 1", "Column 2"]
    assert page.locator("#tokens-0").inner_text().strip() == ""  # the removed column's text did not come back
    _shoot(page, "chat-after-add")
    page.close()


def test_two_length_penalties_show_what_they_reranked_and_a_phone_reaches_the_whole_tree(app_url, browser):
    beam = {"strategy": "beam", "num_beams": 4, "num_return_sequences": 3, "max_new_tokens": 16}
    page, errors = _open_and_run(browser, app_url, [{**beam, "length_penalty": -2.0},
                                                    {**beam, "length_penalty": 2.0}])
    page.wait_for_function("() => document.querySelector('#status')?.innerText.includes('✓ 2 columns ran')",
                           timeout=300_000)
    report = page.locator("#diff")
    assert "what the length penalty re-ranked" in report.inner_text()
    assert report.locator("table strong").filter(has_text="returned 1st").count() == 2  # one per column
    page.set_viewport_size({"width": 390, "height": 900})
    table = report.locator("table")
    table.scroll_into_view_if_needed()
    # the table scrolls sideways inside the page rather than squeezing its cells
    assert table.evaluate("t => getComputedStyle(t).overflowX === 'auto' && t.scrollWidth > t.clientWidth")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
    tree = page.locator("#beam-tree-1 .beam-scroll")
    tree.scroll_into_view_if_needed()
    fade = page.locator("#beam-tree-1 .beam-more")
    # a fade sits on the tree's visible right edge while more of it is to the right ...
    assert abs(fade.bounding_box()["x"] + fade.bounding_box()["width"] - tree.bounding_box()["x"]
               - tree.bounding_box()["width"]) <= 2
    _shoot(page, "beam-penalties-390")
    tree.evaluate("t => { t.scrollLeft = t.scrollWidth; }")
    # ... and rests past the tree's end once it is scrolled there, covering no node
    svg = page.locator("#beam-tree-1 .beam-svg")
    assert fade.bounding_box()["x"] >= svg.bounding_box()["x"] + svg.bounding_box()["width"] - 1
    assert not errors, errors

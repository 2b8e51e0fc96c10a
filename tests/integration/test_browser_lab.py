"""The sampler lab tab in a real browser: a typed distribution through top-p and mirostat on JAX shows each stage's
kept bars and removed ids; a bad distribution or a knob past its range says so in one line; a whole vocabulary
(262,144 entries) draws a capped row of bars; the tab fits a 390 px phone.

Screenshots (light, dark, 390 px) go to $PLAYGROUND_SHOTS when it is set.
"""

from __future__ import annotations

import pytest

from tests.integration.test_browser import _open, _set_slider
from tests.integration.test_browser_looks import PHONE
from tests.integration.test_browser_mechanics import _shoot

pytestmark = pytest.mark.slow


def _lab(page, distribution: str) -> None:
    """The lab tab (on a phone it sits in the tabs' overflow menu), its distribution typed in."""
    tab = page.get_by_role("tab", name="Sampler lab")
    if tab.count() and tab.is_visible():
        tab.click()
    else:
        page.locator("#tabs button[aria-label='More tabs']").click()
        page.locator("#tabs .overflow-dropdown button", has_text="Sampler lab").click()
    box = page.locator("#lab-distribution textarea")
    box.wait_for(state="visible", timeout=30_000)
    box.fill(distribution)


def _apply(page) -> None:
    page.locator("#lab-run").click()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_lab_shows_each_stage_kept_and_removed(app_url, browser, theme):
    page, errors = _open(browser, app_url + ("?__theme=dark" if theme == "dark" else ""))
    _lab(page, "0.5, 0.2, 0.15, 0.1, 0.05")
    _set_slider(page, "lab-top_p", 0.8)
    _set_slider(page, "lab-mirostat_tau", 1.2)  # μ = 2.4 bits: only p >= 2^-2.4 = 0.19 of the top-p's three stays
    page.locator("#lab-backend label", has_text="jax").click()
    _apply(page)
    page.wait_for_selector("#lab-stages .lab-stage", timeout=120_000)
    stages = page.locator("#lab-stages .lab-stage")
    assert stages.count() == 3  # top-p, mirostat, the final distribution
    assert "top-p (0.8)" in stages.nth(0).inner_text() and "removed 2 (3, 4)" in stages.nth(0).inner_text()
    assert "mirostat v2" in stages.nth(1).inner_text() and "removed 1 (2)" in stages.nth(1).inner_text()
    assert stages.nth(2).locator(".lab-bar").count() == 2
    assert "final" in page.locator("#lab-json").inner_text()
    _shoot(page, f"lab-{theme}")
    assert not errors, errors


def test_a_bad_distribution_is_one_line_and_the_tab_fits_a_phone(app_url, browser):
    page = browser.new_page(viewport=PHONE)
    page.goto(app_url)
    page.wait_for_selector("#run", timeout=30_000)
    _lab(page, "0.5, -0.2")
    _apply(page)
    page.get_by_text("probs[1]=-0.2 is not allowed; probabilities are finite numbers >= 0").first.wait_for(
        timeout=30_000)  # Gradio's error notice, with the one line the command prints
    # the tabs behind Gradio's overflow button are announced by its label
    assert page.evaluate("() => getComputedStyle(document.querySelector('#tabs .overflow-menu > button'), "
                         "'::after').content") == '"more tabs"'
    assert page.locator("#lab-shape input").input_value() == "typed by hand"  # the box no longer holds a shape
    # a knob past its range is refused in one line, not clamped to the value that turns its stage off
    top_k = page.locator("#lab-top_k input")
    top_k.fill("-3")
    top_k.press("Tab")
    _lab(page, "0.5, 0.3, 0.15, 0.05")
    _apply(page)
    page.get_by_text("top_k=-3 is out of range; allowed: [0, inf)").first.wait_for(timeout=30_000)
    assert top_k.input_value() == "-3"
    top_k.fill("0")
    top_k.press("Tab")
    _set_slider(page, "lab-top_a", 0.5)  # removes what is below 0.5 x 0.5² = 0.125: id 3
    _apply(page)
    page.wait_for_selector("#lab-stages .lab-stage", timeout=120_000)
    assert "removed 1 (3)" in page.locator("#lab-stages .lab-stage").first.inner_text()
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
    _shoot(page, "lab-phone")

    # Gemma 3's whole vocabulary, tied, through top-k 5: 24 bars and one for the rest per row, and the tab lives
    _set_slider(page, "lab-top_a", 0)
    vocab = 262_144
    _lab(page, ", ".join(["1"] * vocab))
    top_k.fill("5")
    top_k.press("Tab")
    _apply(page)
    page.wait_for_function(f"() => document.querySelector('#lab-stages')?.innerText.includes('kept {vocab:,}')",
                           timeout=120_000)
    rows = page.locator("#lab-stages .lab-stage")
    assert rows.count() == 2  # top-k, then the final distribution
    for i in range(2):
        assert rows.nth(i).locator(".lab-bar").count() == 25
        assert rows.nth(i).locator(".lab-rest small").inner_text() == f"+{vocab - 24:,}"
    assert "final_count" in page.locator("#lab-json").inner_text()  # the JSON view, cut to its first ids
    _shoot(page, "lab-phone-vocabulary")

"""Step mode in a real browser: three steps give greedy's tokens, a click on a lower candidate forks the text (and
the column's token view with it), and the branch tree keeps both branches (SmolLM2 on PyTorch).

Screenshots (light, dark and a 390 px wide phone) go to $PLAYGROUND_SHOTS when it is set.
"""

from __future__ import annotations

import pytest

from tests.integration.test_browser_mechanics import _open_and_run, _shoot

pytestmark = pytest.mark.slow
COLUMNS = [{"strategy": "greedy", "max_new_tokens": 3}, {"strategy": "sampling", "max_new_tokens": 3}]


def _step(page, done: int) -> None:
    """Press Step and wait for its summary (the status line says how many columns it stepped)."""
    page.locator("#step").click()
    page.wait_for_function(f"() => ['0', '1'].every((c) => document.querySelectorAll(`#branches-${{c}} .bnode`)"
                           f".length === {done}) && document.querySelector('#step-status')?.innerText"
                           ".includes('✓ stepped')", timeout=120_000)


def test_three_steps_give_greedy_s_tokens_and_a_lower_candidate_forks_a_second_branch(app_url, browser):
    page, errors = _open_and_run(browser, app_url, COLUMNS)
    page.wait_for_function("() => document.querySelector('#status')?.innerText.includes('✓ 2 columns ran')",
                           timeout=240_000)
    greedy = page.locator("#output-0 textarea").input_value()
    for done in (1, 2, 3):
        _step(page, done)
    assert page.locator("#output-0 textarea").input_value() == greedy  # step by step, the run's tokens
    assert "✓ stepped 2 of 2" in page.locator("#step-status").inner_text()
    candidates = page.locator("#step-candidates-0 button.cand")
    assert candidates.count() == 5 and page.locator("#step-candidates-0 button.cand.chosen").count() == 1
    # that step's cut per stage: none for greedy, temperature and top-k for sampling
    assert "no stage of the chain applied" in page.locator("#step-candidates-0").inner_text()
    assert "cut: temperature: removed 0" in page.locator("#step-candidates-1").inner_text()
    assert "top_k: removed" in page.locator("#step-candidates-1").inner_text()
    _shoot(page, "step-light")

    strip = page.locator("#tokens-0 span.tok")  # the token view shows the branch: its three tokens
    assert strip.count() == 3 and "the branch's tokens" in page.locator("#tokens-0").inner_text()

    lower = page.locator("#step-candidates-0 button.cand:not(.chosen)").first
    picked = lower.locator("b").inner_text()
    lower.click()
    page.wait_for_function("() => document.querySelectorAll('#branches-0 li').length === 2", timeout=30_000)
    forked = page.locator("#output-0 textarea").input_value()
    assert forked != greedy  # the text forks at the last token
    assert strip.count() == 3 and strip.last.inner_text() == picked  # and so does the token view
    tree = page.locator("#branches-0").inner_text()
    assert "first branch" in tree and "forked at token 2" in tree
    # the first branch is kept: a click on its last token resumes there, and the output is greedy's again
    page.locator("#branches-0 li").first.locator(".bnode").last.click()
    page.wait_for_function(f"() => document.querySelector('#output-0 textarea')?.value === {greedy!r}",
                           timeout=30_000)
    assert page.locator("#branches-0 li").count() == 2
    assert not errors, errors

    page.emulate_media(color_scheme="dark")
    _shoot(page, "step-dark")
    page.set_viewport_size({"width": 390, "height": 900})
    _shoot(page, "step-phone")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")

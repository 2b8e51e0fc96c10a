"""Two chat turns in a real browser (SmolLM2 on PyTorch): the second turn restores the first from the prefix store
and its column says how much it reused and its TTFT; "measure cold TTFT" reruns that turn cold and writes both
TTFTs beside it, leaving the conversation as it was.

Screenshots (light, dark and a 390 px wide phone) go to $PLAYGROUND_SHOTS when it is set.
"""

from __future__ import annotations

import re

import pytest

from playground.ui.export import encode_url_state, page_settings
from tests.integration.test_browser import _open
from tests.integration.test_browser_mechanics import _shoot

pytestmark = pytest.mark.slow
COLUMNS = [{"strategy": "greedy", "max_new_tokens": 8}]


def _turn(page, prompt: str, turn: int) -> None:
    """Type a user turn, press Run and wait until the column's transcript holds its answer."""
    page.locator("#prompt textarea").fill(prompt)
    page.locator("#run").click()
    page.wait_for_function(f"() => document.querySelectorAll('#chat-0 .message-row').length >= {2 * turn} && "
                           "document.querySelector('#status')?.innerText.includes('✓ 1 column ran')",
                           timeout=240_000)


def test_the_second_chat_turn_shows_its_reuse_and_a_cold_ttft_on_demand(app_url, browser):
    address = f"{app_url}?s={encode_url_state(page_settings('Name a colour.', 0, 'chat', COLUMNS))}"
    page, errors = _open(browser, address)
    page.wait_for_function("() => document.querySelector('#prompt textarea')?.value === 'Name a colour.'",
                           timeout=60_000)
    page.locator("#chat-0").wait_for(state="visible", timeout=60_000)  # the link's chat mode is applied
    _turn(page, "Name a colour.", 1)
    _turn(page, "And another one?", 2)
    page.locator("#cold-ttft-0").wait_for(state="visible", timeout=30_000)
    notice = page.locator("#notice-0").inner_text()
    reused = re.search(r"reused (\d+) of (\d+) prompt tokens · TTFT [\d.]+ s", notice)
    assert reused is not None, notice
    assert 0 < int(reused.group(1)) < int(reused.group(2))
    transcript = page.locator("#chat-0").inner_text()

    page.locator("#cold-ttft-0").click()
    page.wait_for_function("() => document.querySelector('#cold-ttft-note-0')?.innerText.includes('cold TTFT')",
                           timeout=120_000)
    line = page.locator("#cold-ttft-note-0").inner_text()
    assert re.search(rf"cold TTFT [\d.]+ s vs warm [\d.]+ s \(reused {reused.group(1)} of", line), line
    assert page.locator("#chat-0").inner_text() == transcript  # the conversation is as it was
    assert not errors, errors

    _shoot(page, "chat-reuse-light")
    page.emulate_media(color_scheme="dark")
    _shoot(page, "chat-reuse-dark")
    page.set_viewport_size({"width": 390, "height": 900})
    _shoot(page, "chat-reuse-phone")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")

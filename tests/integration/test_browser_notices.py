"""Notices stay current in a real browser: a typed number put back in range says so, a refusal clears as soon as
its cause does, and the Run button counts the columns on the page.

Screenshots (light, dark and a 390 px wide phone) go to $PLAYGROUND_SHOTS when it is set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from playground.ui.export import encode_url_state, page_settings
from tests.integration.test_browser import _open

pytestmark = pytest.mark.slow


def _shoot(page, name: str) -> None:
    folder = os.environ.get("PLAYGROUND_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def _commit(page, elem_id: str, typed: str) -> str:
    """Type into a control's number box and leave it, as a person does; the value it shows afterwards."""
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(typed)
    box.blur()
    page.wait_for_timeout(300)
    return box.input_value()


def _note(page, elem_id: str) -> str:
    notes = page.locator(f"#{elem_id} .clamp-note")
    return notes.inner_text() if notes.count() else ""


def test_a_number_put_back_in_range_says_what_it_became(app_url, browser):
    columns = [{"strategy": "greedy", "cache": "sliding", "window": 32, "max_new_tokens": 8},
               {"strategy": "sampling", "max_new_tokens": 8}]
    page, errors = _open(browser, f"{app_url}?s={encode_url_state(page_settings('Hi', 0, 'auto', columns))}")
    page.wait_for_selector("#window-0", state="visible", timeout=30_000)

    assert _commit(page, "max_new_tokens-0", "99999") == "1024"  # a slider's box clamps on its own...
    assert _note(page, "max_new_tokens-0") == "99999 is above the maximum, 1024: set to 1024"  # ...and now says so
    assert _commit(page, "temperature-1", "0") == "0.05"
    assert _note(page, "temperature-1") == "0 is below the minimum, 0.05: set to 0.05"
    assert _commit(page, "window-0", "0") == "1"  # a plain number box is put in range too
    assert _note(page, "window-0") == "0 is below the minimum, 1: set to 1"
    _shoot(page, "clamp-light")
    page.emulate_media(color_scheme="dark")
    _shoot(page, "clamp-dark")
    page.emulate_media(color_scheme="light")

    _commit(page, "max_new_tokens-0", "20")
    assert _note(page, "max_new_tokens-0") == ""  # an in-range entry clears its note
    page.get_by_role("button", name="Cache shoot-out").click()
    page.wait_for_function("() => document.querySelector('#window-0 input[type=number]')?.value !== '1'",
                           timeout=10_000)
    assert page.locator(".clamp-note").count() == 0  # a preset replaces the values the notes spoke of
    assert not errors, errors


def test_refusals_clear_as_their_cause_does_and_run_counts_the_columns(app_url, browser):
    page, errors = _open(browser, app_url)
    run = page.locator("#run")
    page.locator("#prompt textarea").fill("")
    run.click()
    page.wait_for_function("() => document.querySelector('#notice-0')?.innerText.includes('prompt is empty')",
                           timeout=30_000)
    page.wait_for_function("() => document.querySelector('#run')?.innerText.includes('Run 0 of 2 columns')",
                           timeout=10_000)

    page.locator("#prompt textarea").fill("Name a colour.")  # as a paste is: no keystrokes
    page.wait_for_function("() => !document.querySelector('#notice-0')?.innerText.includes('prompt is empty')",
                           timeout=10_000)
    assert "prompt is empty" not in page.locator("#notice-1").inner_text()
    assert run.inner_text().strip() == "▶ Run all 2 columns"

    page.locator("#remove-1").click()
    page.wait_for_function("() => document.querySelector('#run')?.innerText.trim() === '▶ Run'", timeout=10_000)
    page.locator("#add-column").click()
    page.wait_for_function("() => document.querySelector('#run')?.innerText.includes('Run all 2 columns')",
                           timeout=10_000)
    page.set_viewport_size({"width": 390, "height": 900})
    _shoot(page, "notices-phone")
    assert not errors, errors

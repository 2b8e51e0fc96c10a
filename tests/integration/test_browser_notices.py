"""Notices stay current in a real browser: a typed number put back in range says so, a refusal clears as soon as
its cause does, and the Run button counts the columns on the page; a constraint pasted, dropped, autofilled or set
by a preset updates the card's check and the Run button.

Screenshots (light, dark and a 390 px wide phone) go to $PLAYGROUND_SHOTS when it is set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from playground.ui.export import encode_url_state, page_settings
from tests.helpers import choose_option
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
                           timeout=30_000)
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
                           timeout=30_000)

    page.locator("#prompt textarea").fill("Name a colour.")  # as a paste is: no keystrokes
    page.wait_for_function("() => !document.querySelector('#notice-0')?.innerText.includes('prompt is empty')",
                           timeout=30_000)
    assert "prompt is empty" not in page.locator("#notice-1").inner_text()
    assert run.inner_text().strip() == "▶ Run all 2 columns"

    page.locator("#remove-1").click()
    page.wait_for_function("() => document.querySelector('#run')?.innerText.trim() === '▶ Run'", timeout=30_000)
    page.locator("#add-column").click()
    page.wait_for_function("() => document.querySelector('#run')?.innerText.includes('Run all 2 columns')",
                           timeout=30_000)
    page.set_viewport_size({"width": 390, "height": 900})
    _shoot(page, "notices-phone")
    assert not errors, errors


SCHEMA = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
WANTS_SCHEMA = "needs its JSON schema in constraint_text"


def _notice_says(page, words: str, present: bool = True) -> None:
    check = "" if present else "!"
    page.wait_for_function(f"() => {check}document.querySelector('#notice-0')?.innerText.includes({words!r})",
                           timeout=30_000)


def _run_reads(page, label: str) -> None:
    page.wait_for_function(f"() => document.querySelector('#run')?.innerText.trim() === {label!r}", timeout=30_000)


def test_a_pasted_dropped_or_autofilled_constraint_updates_the_card_and_the_run_button(app_url, browser):
    """Paste (Ctrl+V), a drop or an autofill (one input event, no keystrokes) and a preset: the card's check and
    the Run button follow each, and a copied link keeps the pasted text. An oversized constraint is refused on
    the card as soon as it is set, with what is too large."""
    one_column = [{"strategy": "greedy", "max_new_tokens": 8}]
    page, errors = _open(browser, f"{app_url}?s={encode_url_state(page_settings('Hi', 0, 'auto', one_column))}")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    choose_option(page, "constraint-0", "json_schema", accordion="constraint-box-0")
    _notice_says(page, WANTS_SCHEMA)
    _run_reads(page, "▶ Run 0 of 1 columns (1 cannot run as set)")

    text = page.locator("#constraint_text-0 textarea")
    page.evaluate("schema => navigator.clipboard.writeText(schema)", SCHEMA)
    text.focus()
    page.keyboard.press("Control+V")
    _notice_says(page, WANTS_SCHEMA, present=False)
    _run_reads(page, "▶ Run")
    assert text.input_value() == SCHEMA
    _shoot(page, "constraint-pasted-light")
    page.emulate_media(color_scheme="dark")
    _shoot(page, "constraint-pasted-dark")
    page.emulate_media(color_scheme="light")

    linked, _ = _open(browser, page.url)  # the address followed the paste
    # a fresh page's load and its state's restore: 10 s was too short beside the full suite's other browser tests
    linked.wait_for_function(f"() => document.querySelector('#constraint_text-0 textarea')?.value === {SCHEMA!r}",
                             timeout=30_000)
    assert linked.locator("#notice-0").inner_text().strip() == ""
    linked.close()

    text.fill("")  # as an autofill that clears the field is
    _notice_says(page, WANTS_SCHEMA)
    _run_reads(page, "▶ Run 0 of 1 columns (1 cannot run as set)")
    choose_option(page, "constraint-0", "regex")
    text.focus()
    page.keyboard.insert_text("a{1000000}")  # as a drop is: one input event
    _notice_says(page, "too large for the grammar engine (llguidance): matching it needs more than 200,000")
    page.set_viewport_size({"width": 390, "height": 900})
    page.wait_for_timeout(500)  # the labels are laid out again at the new width
    _shoot(page, "constraint-too-large-phone")
    page.set_viewport_size({"width": 1440, "height": 1000})

    page.get_by_role("button", name="JSON, free vs schema").click()
    page.wait_for_function("() => document.querySelector('#constraint_text-1 textarea')?.value.includes('age')",
                           timeout=30_000)
    _run_reads(page, "▶ Run all 3 columns")
    assert all(page.locator(f"#notice-{i}").inner_text().strip() == "" for i in range(3))
    assert not errors, errors

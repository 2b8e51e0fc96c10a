"""The Long context tab in a real browser: the preset fills the tab, a refusal is one line that keeps the inputs,
then the preset, shrunk to two of its caches on PyTorch over a tiny random-weight model (saved where the session's
app may load local models from), runs and draws its four plots and two tables: on a shared 2-core CPU
the same run on SmolLM2 outlasted 25 minutes.

Screenshots (before a run; after one in light, dark and on a 390 px wide phone) go to $PLAYGROUND_SHOTS when it
is set.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from playground.ui.presets import CONTEXT_PRESETS
from tests.helpers import save_tiny_model
from tests.integration.test_browser import _open
from tests.integration.test_browser_mechanics import _shoot

pytestmark = pytest.mark.slow
PRESET = "Long document: which cache keeps up?"
PLOTS = ("context-speed-plot", "context-memory-plot", "context-kl-plot", "context-top1-plot")
WINDOW = 32  # below the quality tokens and both lengths: the sink cache evicts


def _marks(page, plot: str) -> int:
    """How many marks (lines, with a point per value) Vega drew in a plot."""
    return page.eval_on_selector_all(f"#{plot} svg [role='graphics-symbol'], #{plot} svg .mark-line path",
                                     "marks => marks.length")


def _legend(page) -> list[str]:
    """The entries of the tab's legend that show whole inside the page's width (the plots' own are hidden)."""
    return page.eval_on_selector("#context-legend", """block => {
        const right = document.documentElement.clientWidth;
        return [...block.querySelectorAll('.context-key')]
            .filter(key => key.getBoundingClientRect().right <= right && key.offsetParent !== null)
            .map(key => key.textContent);
    }""")


def _fill(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input, #{elem_id} textarea").first
    box.fill(value)
    box.press("Tab")


def _tick(page, elem_id: str, label: str, on: bool) -> None:
    box = page.locator(f"#{elem_id}").get_by_label(label, exact=True)
    box.check() if on else box.uncheck()


@pytest.fixture(scope="module")
def tiny_app(app_url: str, local_models: Path) -> tuple[str, str]:
    """The session's app, and the path of a tiny model saved where it may load local models from."""
    return app_url, save_tiny_model(local_models / "tiny-context")


def _wait_for_status(page, pattern: str, timeout_s: float) -> str:
    """Wait until the status line matches `pattern`; a timeout fails with what the line said."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = page.locator("#context-status").inner_text()
        if re.search(pattern, status):
            return status
        time.sleep(0.5)
    pytest.fail(f"the status line never matched {pattern!r}; it said: {status!r}")


def test_the_preset_runs_and_draws_speed_memory_and_quality(tiny_app, browser):
    app_url, model = tiny_app
    page, errors = _open(browser, app_url)
    page.get_by_role("tab", name="Long context").click()
    page.wait_for_selector("#context-empty", state="visible", timeout=30_000)
    assert not page.locator("#context-speed-plot").is_visible()
    page.locator("#context-preset-0").click()
    page.wait_for_function("() => document.querySelector('#context-preset-note')?.innerText.includes('sinks')",
                           timeout=30_000)
    preset = CONTEXT_PRESETS[PRESET]
    for cache in preset.caches:
        assert page.locator("#context-caches").get_by_label(cache, exact=True).is_checked()
    assert page.locator("#context-sink-sink_tokens").is_visible() and not page.locator("#context-text").is_visible()
    _shoot(page, "context-empty")

    # a window the text measured never fills: one line, and nothing else changes
    _fill(page, "context-lengths", "128")
    _fill(page, "context-tokens", "200")
    page.locator("#context-run").click()
    _wait_for_status(page, "window=256 is not smaller than the 200 tokens", 60)
    assert page.locator("#context-caches").get_by_label("sink", exact=True).is_checked()

    # two of the preset's caches on PyTorch (no compiles; quanto would build its kernels for minutes), short
    for cache in ("sliding", "quantized"):
        _tick(page, "context-caches", cache, False)
    _tick(page, "context-backends", "jax", False)
    _tick(page, "context-backends", "torch", True)
    _fill(page, "context-sink-window", str(WINDOW))
    _fill(page, "context-model", model)
    _fill(page, "context-lengths", "48,96")
    _fill(page, "context-tokens", "96")
    _fill(page, "context-buckets", "3")
    page.locator("#context-run").click()
    _wait_for_status(page, "done: 2 runs", 600)
    assert not page.locator("#context-empty").is_visible()
    for plot in PLOTS:
        assert page.locator(f"#{plot}").is_visible() and _marks(page, plot) > 0, plot
    assert _legend(page) == ["static · torch", "sink · torch"]  # each run by its cache and backend
    # the speed table: a line per run and length, with units in its headers
    speed_rows = page.locator("#context-speed-table [role=row]").count()
    assert speed_rows >= 1 + 2 * 2
    headers = " ".join(page.locator("#context-speed-table [role=columnheader]").all_inner_texts())
    assert "decode (tokens/s)" in headers and "KV cache (MiB)" in headers
    quality = page.locator("#context-quality-table").inner_text()
    assert "static · torch" in quality and f"sink (window {WINDOW}, sink_tokens 4) · torch" in quality
    _shoot(page, "context-light")
    page.emulate_media(color_scheme="dark")
    page.wait_for_function("() => document.querySelector('.dark') !== null", timeout=30_000)
    _shoot(page, "context-dark")
    page.set_viewport_size({"width": 390, "height": 900})
    _shoot(page, "context-phone")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390 + 1

    assert not errors

    # quality only, on a phone, in a page of its own (a second run in one page makes Gradio's plots throw from a
    # resize observer of the plots it drew before): no empty speed or KV plot and no empty speed table; the
    # legend whole
    page, errors = _open(browser, app_url)
    page.set_viewport_size({"width": 390, "height": 900})
    page.locator("#tabs button[aria-label='More tabs']").click()
    page.locator("#tabs .overflow-dropdown button", has_text="Long context").click()
    page.locator("#context-preset-0").click()
    page.wait_for_function("() => document.querySelector('#context-preset-note')?.innerText.includes('sinks')",
                           timeout=30_000)
    for cache in ("sliding", "quantized"):
        _tick(page, "context-caches", cache, False)
    _tick(page, "context-backends", "jax", False)
    _tick(page, "context-backends", "torch", True)
    _tick(page, "context-measures", "speed", False)
    for elem_id, value in (("context-sink-window", str(WINDOW)), ("context-model", model), ("context-lengths", "48,96"),
                           ("context-tokens", "96"),
                           ("context-buckets", "3")):
        _fill(page, elem_id, value)
    page.locator("#context-run").click()
    _wait_for_status(page, "done: 2 runs", 600)
    assert not page.locator("#context-speed-plot").is_visible()
    assert not page.locator("#context-memory-plot").is_visible()
    assert not page.locator("#context-speed-table").is_visible()
    assert page.locator("#context-kl-plot").is_visible() and page.locator("#context-quality-table").is_visible()
    assert _legend(page) == ["static · torch", "sink · torch"]
    _shoot(page, "context-phone-quality")
    assert not errors

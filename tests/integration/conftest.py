"""Fixtures the browser tests share: one served app and one Debian chromium per test worker.

Session-scoped, so the browser files a worker runs share them (the tab-closing test launches its own browser
through this one's Playwright): each file used to start its own app and browser, and every app imported the
libraries, loaded the model and compiled its programs again. Each test opens a fresh page, so no test sees
another's page; the app is shared the way a served app is, by its users. A test's pages are closed when it ends,
a module fixture's when the module does (`_pages_closed_after_each_test`, `_pages_closed_after_each_module`): a
Gradio page left open keeps polling and drawing, and the pages of the files before it took most of a core from
the rest of the suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from playground.tools.serve import serve_app
from tests.helpers import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def local_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the session's app may load local models from (its PLAYGROUND_MODEL_ROOTS): a test saves the
    model it types in as a path here, rather than starting an app of its own (an app's start imports the
    libraries again)."""
    return tmp_path_factory.mktemp("local-models")


@pytest.fixture(scope="session")
def app_url(local_models: Path) -> Iterator[str]:
    # 60 s, not the default 120: nothing should load at startup, so a slow start is itself a failure
    env = {"HF_HUB_OFFLINE": "1", "PLAYGROUND_MODEL_ROOTS": str(local_models)}
    with serve_app(env=env, timeout_s=60) as app:
        yield app.url


_browsers: list = []  # the session's browser, once a test has asked for it


@pytest.fixture(scope="session")
def browser():
    from playwright import sync_api

    if not Path(CHROMIUM).exists():
        # a failure, not a skip: CI must really run this test
        pytest.fail("Debian chromium is not installed at /usr/bin/chromium (scripts/setup.sh --dev installs it)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        _browsers.append(browser)
        yield PatientBrowser(browser)
        _browsers.clear()
        browser.close()


class PatientBrowser:
    """The session's browser, whose pages wait 60 s for an element or an action instead of Playwright's 30: on a
    loaded 2-core machine (two test workers, a JAX compile beside the page's server) a renderer has stalled past
    30 s on a key press. A test that passes waits no longer; one that fails says so later."""

    TIMEOUT_MS = 60_000

    def __init__(self, browser) -> None:
        self._browser = browser

    def new_page(self, **options):
        page = self._browser.new_page(**options)
        page.set_default_timeout(self.TIMEOUT_MS)
        return page

    def new_context(self, **options):
        context = self._browser.new_context(**options)
        context.set_default_timeout(self.TIMEOUT_MS)
        return context

    def __getattr__(self, name: str):
        return getattr(self._browser, name)


@pytest.fixture(autouse=True)
def _pages_closed_after_each_test() -> Iterator[None]:
    """Close the pages (each in its own context) a test opened, once it ends; those a module-scoped fixture
    opened (set up before this) stay for the module's other tests. An idle page left open still took a tenth of a
    core, drawing, for the rest of its module."""
    before = {id(context) for browser in _browsers for context in browser.contexts}
    yield
    for browser in _browsers:
        for context in list(browser.contexts):
            if id(context) not in before:
                context.close()


@pytest.fixture(scope="module", autouse=True)
def _pages_closed_after_each_module() -> Iterator[None]:
    """Close every page (each in its own context) the module opened in the shared browser; module-scoped page
    fixtures are torn down before this, as they were set up after it."""
    yield
    for browser in _browsers:
        for context in list(browser.contexts):
            context.close()

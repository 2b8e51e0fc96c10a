"""Fixtures the browser tests share: one served app and one Debian chromium per test worker.

Session-scoped, so the browser files a worker runs share them (the tab-closing test launches its own browser
through this one's Playwright): each file used to start its own app and browser, and every app imported the
libraries, loaded the model and compiled its programs again. Each test opens a fresh page, so no test sees
another's page; the app is shared the way a served app is, by its users.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from playground.tools.serve import serve_app
from tests.helpers import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    # 60 s, not the default 120: nothing should load at startup, so a slow start is itself a failure
    with serve_app(env={"HF_HUB_OFFLINE": "1"}, timeout_s=60) as app:
        yield app.url


@pytest.fixture(scope="session")
def browser():
    from playwright import sync_api

    if not Path(CHROMIUM).exists():
        # a failure, not a skip: CI must really run this test
        pytest.fail("Debian chromium is not installed at /usr/bin/chromium (scripts/setup.sh --dev installs it)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()

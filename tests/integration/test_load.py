"""A served app under 8 concurrent clients x 5 requests, valid and invalid mixed: no valid request fails."""

import pytest

from playground.tools import loadtest
from playground.tools.serve import serve_app

pytestmark = pytest.mark.slow


def test_app_serves_every_valid_request_under_concurrent_load():
    with serve_app() as app:
        report = loadtest.run_load(app.url, clients=8, requests=5, app_pid=app.pid)
    print(report)
    assert report["valid_requests"] + report["invalid_requests"] == 40
    assert report["failures"] == [] and report["served"] == report["valid_requests"]
    assert report["refused"] == report["invalid_requests"] and report["accepted_invalid"] == 0
    assert report["still_answers"]
    assert report["peak_rss_bytes"] > 0

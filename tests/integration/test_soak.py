"""A short soak of the served app: random valid requests over both bundled models, both backends, every strategy
and cache, some clients leaving mid-stream; nothing fails and memory stays flat once warmed up.

The soak runs beside the rest of the suite from the session's start (tests/background_soak.py); this test, queued
last, asserts on its report.
"""

import pytest

from playground.tools import soak
from tests import background_soak

pytestmark = pytest.mark.slow


def test_three_minutes_of_varied_requests_fail_nothing_and_memory_stays_flat():
    report = background_soak.wait_for_report()
    assert "error" not in report, report.get("error")
    print(report["summary"])
    result = report["result"]
    assert result["failed"] == 0 and result["served"] > 0, result["failures"]
    assert result["rss_rise"] is not None and result["rss_rise"] <= soak.RSS_RISE_LIMIT
    assert result["still_answers"] and result["ok"]
    # the app ran on the one CPU it was given, every thread of it
    threads = report["threads"]
    assert len(threads) > 1 and all(cpus in (report["cpus"], None) for cpus in threads.values()), threads

"""A short soak of the served app: random valid requests over both bundled models, both backends, every strategy
and cache, some clients leaving mid-stream; nothing fails and memory stays flat once warmed up."""

import os

import pytest

from playground.tools import soak
from playground.tools.serve import serve_app

# extended: three minutes by design (memory after a minute's warm-up against the last quarter); the full suite
# keeps test_load.py's concurrent requests over the same app
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def cpus_of(thread: int) -> frozenset[int] | None:
    """The CPUs a thread may run on; None if it ended since it was listed."""
    try:
        return frozenset(os.sched_getaffinity(thread))
    except ProcessLookupError:
        return None


def test_three_minutes_of_varied_requests_fail_nothing_and_memory_stays_flat():
    # A bound the warm-up fills, so what holds memory afterwards is the bound. With 256M the programs kept
    # growing after the one-minute warm-up (a 30-minute soak's RSS is flat only from its fifth minute): the last
    # quarter ended 9-15% above the warm-up on this machine, a coin toss at the 15% limit. With 64M: +2.9% and +4.1%.
    # One CPU: each test worker has one CPU's worth of threads (tests/conftest.py), but the app keeps more than
    # one thread busy at a time (decoding, compiling, streaming: 1.23 cores over a soak), and over the soak's
    # fixed three minutes that much more would be taken from the other worker.
    cpus = {min(os.sched_getaffinity(0))}
    with serve_app(env={"PLAYGROUND_PROGRAM_CACHE": "64M"}, cpus=cpus) as app:
        result = soak.run_soak(app.url, app.pid, minutes=3.0, clients=3, warmup_minutes=1.0, seed=1)
        threads = {int(task): cpus_of(int(task)) for task in os.listdir(f"/proc/{app.pid}/task")}
        assert len(threads) > 1 and set(threads.values()) <= {frozenset(cpus), None}, threads
    print(soak.summary(result))
    assert result["failed"] == 0 and result["served"] > 0, result["failures"]
    assert result["rss_rise"] is not None and result["rss_rise"] <= soak.RSS_RISE_LIMIT
    assert result["still_answers"] and result["ok"]

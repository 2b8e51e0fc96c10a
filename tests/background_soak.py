"""The short soak of tests/integration/test_soak.py, run beside the rest of the suite rather than in a worker's turn.

Its clients send requests for a fixed three minutes, so in a worker's turn it held that worker for four minutes
however fast the app was. The test session's main process (tests/conftest.py) starts it here as soon as the
soak test is collected; it then runs while the workers run the other tests, its app confined to one CPU, and
the test, queued last, asserts on the report it wrote. The soak's app competes with the suite for that CPU, as
a served app competes with whatever else its machine runs; what the soak asserts (no failure, memory flat after
the warm-up, an answer at the end) does not depend on how many requests it gets through.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any

# where the main process writes the report (set by it before the workers start, so they inherit it)
REPORT_PATH = "PLAYGROUND_TEST_SOAK_REPORT"
# A bound the warm-up fills, so what holds memory afterwards is the bound. With 256M the programs kept growing
# after the one-minute warm-up (a 30-minute soak's RSS is flat only from its fifth minute): the last quarter
# ended 9-15% above the warm-up on this machine, a coin toss at the 15% limit. With 64M: +2.9% and +4.1%.
PROGRAM_CACHE = "64M"

_started: list[threading.Thread] = []
_app_pids: list[int] = []


def start(report: Path) -> None:
    """Start the soak on a thread of this process (once), writing its report to `report` when it ends."""
    if _started:
        return
    thread = threading.Thread(target=_soak, args=(report,), name="soak", daemon=True)
    _started.append(thread)
    thread.start()


def _cpus_of(thread: int) -> list[int] | None:
    """The CPUs a thread may run on; None if it ended since it was listed."""
    try:
        return sorted(os.sched_getaffinity(thread))
    except ProcessLookupError:
        return None


def _soak(report: Path) -> None:
    from playground.tools import soak
    from playground.tools.serve import serve_app

    outcome: dict[str, Any]
    try:
        # one CPU: the workers each have one CPU's worth of threads, and the app would keep more than one busy
        # (decoding, compiling, streaming: 1.23 cores over a soak on its own)
        cpus = {min(os.sched_getaffinity(0))}
        # the workers' environment (tests/conftest.py: _isolated_env), set here since this process runs no test
        env = {"PLAYGROUND_PROGRAM_CACHE": PROGRAM_CACHE, "HF_HUB_OFFLINE": "1", "PLAYGROUND_COMPILE_CACHE": "0",
               "TOKENIZERS_PARALLELISM": "false"}
        with serve_app(env=env, cpus=cpus) as app:
            _app_pids.append(app.pid)
            result = soak.run_soak(app.url, app.pid, minutes=3.0, clients=3, warmup_minutes=1.0, seed=1)
            threads = {task: _cpus_of(int(task)) for task in os.listdir(f"/proc/{app.pid}/task")}
        outcome = {"result": result, "summary": soak.summary(result), "cpus": sorted(cpus), "threads": threads}
    except Exception:  # noqa: BLE001 - the test reports it
        outcome = {"error": traceback.format_exc()}
    partial = report.with_suffix(".partial")
    partial.write_text(json.dumps(outcome))
    partial.replace(report)


def stop() -> None:
    """At the session's end: a soak still running (the session ended early) stops its app and ends."""
    for thread in _started:
        if thread.is_alive():
            for pid in _app_pids:
                try:
                    os.kill(pid, 15)
                except ProcessLookupError:
                    pass
            thread.join(timeout=60)


def wait_for_report(timeout_s: float = 900) -> dict[str, Any]:
    """The report the main process wrote (waiting for the soak to end), in the test's process."""
    path = os.environ.get(REPORT_PATH)
    assert path, f"${REPORT_PATH} is not set: the soak starts from tests/conftest.py in the session's main process"
    deadline = time.monotonic() + timeout_s
    while not Path(path).exists():
        assert time.monotonic() < deadline, f"the soak wrote no report to {path} within {timeout_s:g} s"
        time.sleep(2)
    return json.loads(Path(path).read_text())

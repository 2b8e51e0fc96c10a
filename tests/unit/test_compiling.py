"""A request's programs compile on worker threads: side by side, traced one at a time, and left to finish on
their own when the request is stopped, so a Stop never waits for XLA and the next request does not either."""

from __future__ import annotations

import threading
import time

import pytest
import torch

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground import generation_slot  # noqa: E402
from playground.backends.jax.engine import compiling  # noqa: E402
from playground.backends.jax.engine.engine import Engine  # noqa: E402
from playground.generation_slot import LEFT_RUNNING  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import fast_lane_keeps, jax_run, tiny_llama, tiny_loaded  # noqa: E402

PROMPT = torch.tensor([[5, 17, 42, 99, 3]])
SLOW_S = 1.5  # each build made this much slower, well past the 0.3 s after which the test stops the run


@pytest.fixture(scope="module")
def llama():
    return tiny_loaded("tiny-llama-compiling", tiny_llama(seed=3))


def spec(**overrides) -> RunSpec:
    return RunSpec(**{"backend": "jax", "cache": "static", "max_new_tokens": 9, "min_new_tokens": 9, **overrides})


class Builds:
    """Engine._build made slower by `delay`, counting how many builds and traces run at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, delay: float) -> None:
        self.lock = threading.Lock()
        self.running = self.most_running = self.tracing = self.most_tracing = 0
        original = Engine._build

        def build(engine, key, lower, warm):
            def counted_lower():
                self._count("tracing", +1)
                try:
                    time.sleep(delay / 10)  # long enough for another thread's trace to overlap, were it allowed
                    return lower()
                finally:
                    self._count("tracing", -1)

            self._count("running", +1)
            try:
                time.sleep(delay)
                return original(engine, key, counted_lower, warm)
            finally:
                self._count("running", -1)

        monkeypatch.setattr(Engine, "_build", build)

    def _count(self, name: str, step: int) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + step)
            most = f"most_{name}"
            setattr(self, most, max(getattr(self, most), getattr(self, name)))


def test_a_stop_while_compiling_ends_the_run_at_once_and_the_compile_serves_a_later_request(llama, monkeypatch):
    # one program compiles at a time, as on the suite's one-CPU workers: run on its own on a larger machine, the
    # stopped request's start and decode programs would compile side by side and both be left running
    monkeypatch.setenv("PLAYGROUND_COMPILE_THREADS", "1")
    kept = spec()
    jax_run(llama, PROMPT, kept)  # compiled before the builds are slowed: in memory from here on
    Builds(monkeypatch, SLOW_S)
    cold = spec(strategy="sampling", temperature=0.7, seed=5)  # its own start and decode programs
    asked = time.perf_counter()
    stopped, chunks = jax_run(llama, PROMPT, cold, lambda: time.perf_counter() - asked > 0.3)
    waited = time.perf_counter() - asked
    assert stopped.stopped and stopped.sequences == [[]] and chunks == []
    assert stopped.extra["stopped_while_compiling"] and 0.3 <= stopped.compile_s <= waited
    assert waited < SLOW_S  # did not wait for the compile it started
    assert LEFT_RUNNING.running() == 1  # the compile it left: the runs it overlaps say so

    served = time.perf_counter()
    again, _ = jax_run(llama, PROMPT, kept)  # the next request: its programs are kept, so it never waits
    assert time.perf_counter() - served < SLOW_S and again.compile_s == 0.0 and len(again.sequences[0]) == 9

    later, _ = jax_run(llama, PROMPT, cold)  # joins the compile left running, and builds what was dropped
    assert not later.stopped and len(later.sequences[0]) == 9
    assert jax_run(llama, PROMPT, cold)[0].sequences == later.sequences  # all of it kept now
    assert LEFT_RUNNING.running() == 0


def test_left_running_work_counts_once_where_spans_overlap(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(generation_slot.time, "monotonic", lambda: clock[0])
    left = generation_slot.LeftRunning()
    first = left.started()
    clock[0] = 102.0
    second = left.started()
    clock[0] = 104.0
    first()
    clock[0] = 105.0
    second()
    assert left.running() == 0
    assert left.overlap_s(101.0, 110.0) == pytest.approx(4.0)  # 101-105, the overlap of the two counted once
    assert left.overlap_s(90.0, 99.0) == 0.0 and left.overlap_s(104.5, 104.6) == pytest.approx(0.1)
    third = left.started()  # still running: counts up to the end asked about
    assert left.overlap_s(105.0, 108.0) == pytest.approx(3.0) and left.running() == 1
    third()


# the fast lane: two threads, which the request's programs fill and never pass (one thread: the full suite's)
@pytest.mark.parametrize("threads", fast_lane_keeps([1, 2], keep=1))
def test_a_requests_programs_compile_side_by_side_and_trace_one_at_a_time(monkeypatch, threads):
    monkeypatch.setenv("PJRT_NPROC", str(threads))
    builds = Builds(monkeypatch, 0.3)
    fresh = tiny_loaded(f"tiny-llama-threads-{threads}", tiny_llama(seed=10 + threads))  # an engine of its own
    out, _ = jax_run(fresh, PROMPT, spec(cache="dynamic", max_new_tokens=20, min_new_tokens=20))
    assert len(out.sequences[0]) == 20 and out.compile_s > 0
    assert builds.most_running == threads
    assert builds.most_tracing == 1


def test_compile_threads_follow_the_setting_then_xlas_pool_then_the_cpus(monkeypatch):
    from playground import host

    monkeypatch.setenv("PJRT_NPROC", "3")
    monkeypatch.setenv("PLAYGROUND_COMPILE_THREADS", "1")
    assert compiling.compile_threads() == 1
    monkeypatch.setenv("PLAYGROUND_COMPILE_THREADS", "0")  # not a count: ignored
    assert compiling.compile_threads() == 3
    monkeypatch.delenv("PJRT_NPROC")
    assert compiling.compile_threads() == host.limits().cpus


def test_a_failed_compile_raises_on_the_requests_thread(llama, monkeypatch):
    def broken(engine, key, lower, warm):
        raise RuntimeError("XLA said no")

    monkeypatch.setattr(Engine, "_build", broken)
    with pytest.raises(RuntimeError, match="XLA said no"):
        jax_run(llama, PROMPT, spec(top_k=7, strategy="sampling"))

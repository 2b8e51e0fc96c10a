"""Programs compile on worker threads: side by side within a request, and abandoned when its run is stopped.

XLA's compile of one program cannot be interrupted, and a large one takes seconds (SmolLM2's quantized-cache
decode chunk: ~8 s). Compiled on the request's own thread, a Stop pressed meanwhile waited for it, and so did
every request queued behind the generation slot. Here a request hands its programs to a pool of its own,
waits for them while polling its stop flag, and on a stop returns at once: the compiles already running finish
on their threads (their programs land in the engine's program cache for the next request that wants them),
and the ones not yet started are dropped. A compile left running takes CPU from the runs that follow, so it is
recorded (generation_slot.LEFT_RUNNING) and those runs report how long it overlapped them.

Up to compile_threads() programs of a request compile at once: XLA's compile releases the GIL, so a request's
decode chunk and its prefill (the two largest) compile side by side. Tracing the model is serialized under
TRACING: the traced twin keeps per-trace state (its fused projections' shared products) and torchax's
environment is one per process.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from playground import host
from playground.generation_slot import LEFT_RUNNING

# every trace of the model (lowering a program, or a jitted call that traces) holds this
TRACING = threading.RLock()
POLL_S = 0.05  # how often a request waiting for its programs looks at its stop flag


def compile_threads() -> int:
    """Programs one request compiles at once: PLAYGROUND_COMPILE_THREADS if set, else as many as XLA's CPU pool
    has threads (PJRT_NPROC, which the test suite's workers set to one each), else the CPUs this process may
    use."""
    for name in ("PLAYGROUND_COMPILE_THREADS", "PJRT_NPROC"):
        configured = os.environ.get(name, "").strip()
        if configured.isdigit() and int(configured) > 0:
            return int(configured)
    return host.limits().cpus


class Pending:
    """A program that may still be compiling; calling it waits for it, then runs it."""

    def __init__(self, future: Future[Any], built: bool) -> None:
        self.future = future
        self.built = built  # compiled (or loaded from disk) for this request, rather than kept in memory

    @classmethod
    def ready(cls, program: Any) -> Pending:
        """A program kept in memory."""
        future: Future[Any] = Future()
        future.set_result(program)
        return cls(future, built=False)

    def result(self) -> Any:
        """The compiled program (waits for it; raises what its compile raised)."""
        return self.future.result()

    def __call__(self, *args: Any) -> Any:
        return self.result()(*args)


class Compiles:
    """One request's compile pool. Running builds finish on their own threads whatever happens to the request;
    one the request stopped waiting for counts as work left running (LEFT_RUNNING) until it ends."""

    def __init__(self, threads: int) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="jax-compile")
        self._futures: list[Future[Any]] = []

    def submit(self, build: Callable[[], Any]) -> Future[Any]:
        future = self._executor.submit(build)
        self._futures.append(future)
        return future

    def close(self, abandon: bool) -> None:
        """No more builds. With `abandon`, the asker has stopped waiting: builds not started are dropped, and
        those still running are recorded as left running; without, the asker waits for them."""
        self._executor.shutdown(wait=False, cancel_futures=abandon)
        for future in self._futures if abandon else []:
            if not future.done():
                future.add_done_callback(_ends(LEFT_RUNNING.started()))


def _ends(ended: Callable[[], None]) -> Callable[[Future[Any]], None]:
    """A done-callback that records the end of a piece of left-running work."""
    return lambda _future: ended()


_CURRENT: ContextVar[Compiles | None] = ContextVar("compiles", default=None)


@contextmanager
def request_compiles() -> Iterator[Compiles]:
    """Within the block, programs built on this thread compile on the request's pool; on leaving, builds not yet
    started are dropped (a request leaves before its programs are ready only when stopped, or failing)."""
    compiles = Compiles(compile_threads())
    token = _CURRENT.set(compiles)
    try:
        yield compiles
    finally:
        _CURRENT.reset(token)
        compiles.close(abandon=True)


def submit(build: Callable[[], Any]) -> Future[Any]:
    """`build` on the current request's pool; outside a request (a bench, the teacher-forced scan), on a
    thread of its own."""
    compiles = _CURRENT.get()
    if compiles is not None:
        return compiles.submit(build)
    single = Compiles(1)
    future = single.submit(build)
    single.close(abandon=False)
    return future


def wait_all(pending: Iterable[Pending], should_stop: Callable[[], bool]) -> bool:
    """Wait until every program is compiled (True), or until should_stop() (False). A failed compile raises."""
    futures = {p.future for p in pending}
    while futures:
        finished, futures = wait(futures, timeout=POLL_S, return_when=FIRST_COMPLETED)
        for future in finished:
            future.result()  # raises the compile's error, on the request's thread
        if futures and should_stop():  # asked only while something still compiles
            return False
    return True


def timed_wait(pending: list[Pending], should_stop: Callable[[], bool], since: float) -> tuple[bool, float]:
    """wait_all, and the seconds from `since` (when the first was asked for) until every program was ready:
    0.0 when all were kept in memory."""
    ready = wait_all(pending, should_stop)
    return ready, time.perf_counter() - since if any(p.built for p in pending) else 0.0

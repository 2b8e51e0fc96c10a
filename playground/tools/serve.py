"""Start the app (`python app.py`, or `python -m playground serve`) on a free loopback port, wait until it
answers, and stop it afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


@dataclass(frozen=True)
class ServedApp:
    """A running app: where clients reach it, and its process id (for memory sampling)."""

    url: str
    pid: int


def free_port() -> int:
    """A loopback port nothing listens on now, so several apps (tests, load tests) can run side by side."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    """Whether the server accepts connections yet: the app is ready once Gradio listens."""
    try:
        socket.create_connection((HOST, port), timeout=1).close()
    except OSError:
        return False
    return True


def _tail(log: IO[bytes], limit: int = 4000) -> str:
    """The last `limit` characters the app wrote, for an error message that says why it did not start."""
    log.flush()
    log.seek(0)
    return log.read().decode(errors="replace")[-limit:]


@contextmanager
def serve_app(port: int | None = None, env: dict[str, str] | None = None, timeout_s: float = 120,
              cpus: set[int] | None = None, command: tuple[str, ...] = ("app.py",)) -> Iterator[ServedApp]:
    """Run the app until the block ends; `env` adds to (or overrides) this process's environment, and `cpus`
    (CPU numbers) confines it to those CPUs, where it would otherwise run on any this process may use.
    `command`: Python's arguments that start it (the Space's `app.py`, or `-m playground serve`).

    The app's stdout and stderr go to a temporary file rather than a pipe, so a chatty app never blocks on a
    full pipe, and a start-up failure can still quote what it printed. Raises RuntimeError when the app exits
    during start-up or does not answer within `timeout_s` seconds.
    """
    port = free_port() if port is None else port
    child_env = {**os.environ, **(env or {}), "GRADIO_SERVER_NAME": HOST, "GRADIO_SERVER_PORT": str(port),
                 "GRADIO_ANALYTICS_ENABLED": "False"}
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen([sys.executable, *command], cwd=ROOT, env=child_env, stdout=log,
                                   stderr=subprocess.STDOUT)
        try:
            if cpus is not None:  # set before the app starts a thread: each thread it starts inherits it
                os.sched_setaffinity(process.pid, cpus)
            deadline = time.monotonic() + timeout_s
            while not _answers(port):
                if process.poll() is not None:
                    raise RuntimeError(f"the app exited during start-up (code {process.returncode}):\n{_tail(log)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the app did not answer on port {port} within {timeout_s:g} s:\n{_tail(log)}")
                time.sleep(0.3)
            yield ServedApp(url=f"http://{HOST}:{port}/", pid=process.pid)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

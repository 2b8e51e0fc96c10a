"""Fixtures for every test; the helpers they build on live in tests/helpers.py."""

from __future__ import annotations

import os

from playground import host

# On pytest-xdist's workers (scripts/test.sh runs two) each worker, and each process it starts, gets one CPU's
# worth of threads: two workers with a pool of every CPU each put twice as many spinning threads on the
# cores as there are cores, and measured 4.6x slower than one thread each (two concurrent greedy runs of a
# SmolLM2-sized model, 2-core machine). Set before torch starts its pool.
if os.environ.get("PYTEST_XDIST_WORKER"):
    host.apply_thread_limits(max(1, host.limits().cpus // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))

import pytest  # noqa: E402

from tests.helpers import tiny_loaded  # noqa: E402


@pytest.fixture
def tiny():
    return tiny_loaded()


@pytest.fixture(autouse=True, scope="session")
def _isolated_env():
    """Tests never touch a hub; the conversion cache is the user's (so bundled models convert once).

    JAX's on-disk compilation cache is off in the test process: it would hold hundreds of programs of random
    tiny models that no later run asks for, and XLA's CPU executable deserializer has crashed the whole run
    (SIGSEGV) after about 30 minutes of such reads. The restart tests turn it on in the processes they start.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["PLAYGROUND_COMPILE_CACHE"] = "0"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    yield

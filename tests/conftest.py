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

# The files that took 30 s or more in the full suite, heaviest first (seconds summed over a file's tests,
# `CI=true bash scripts/test.sh --junitxml=...` on a fresh clone, AMD EPYC 2 cores, 2026-11-26). The workers take
# whole files, longest first (the full suite passes --no-loadscope-reorder, so this order is the queue): the
# default queue, by number of tests, put the one-test soak (235 s) last, and one worker ran it alone at the end.
HEAVIEST_FILES = (
    "tests/integration/test_bundled_grid.py",  # 535 s
    "tests/integration/test_jax_quantized_error_gemma3.py",  # 312 s
    "tests/integration/test_soak.py",  # 235 s
    "tests/integration/test_jax_assisted.py",  # 225 s
    "tests/integration/test_jax_quantized_error.py",  # 222 s
    "tests/integration/test_jax_caches.py",  # 207 s
    "tests/unit/test_jax_caches.py",  # 196 s
    "tests/unit/test_jax_assisted.py",  # 195 s
    "tests/integration/test_presets.py",  # 184 s
    "tests/unit/test_jax_decoder.py",  # 145 s
    "tests/unit/test_jax_int8.py",  # 116 s
    "tests/integration/test_architecture_grid.py",  # 114 s
    "tests/integration/test_browser.py",  # 94 s
    "tests/integration/test_jax_beam.py",  # 86 s
    "tests/unit/test_jax_beam.py",  # 74 s
    "tests/integration/test_browser_mechanics.py",  # 72 s
    "tests/unit/test_bench_compile.py",  # 58 s
    "tests/integration/test_jax_decoder.py",  # 57 s
    "tests/integration/test_hardening.py",  # 47 s
    "tests/unit/test_token_probabilities.py",  # 45 s
    "tests/integration/test_sink_cache.py",  # 44 s
    "tests/unit/test_runner.py",  # 44 s
    "tests/integration/test_budget.py",  # 36 s
    "tests/integration/test_browser_looks.py",  # 36 s
    "tests/integration/test_app.py",  # 34 s
    "tests/integration/test_warmup.py",  # 34 s
    "tests/integration/test_browser_sweep.py",  # 33 s
    "tests/unit/test_bench_weights.py",  # 33 s
    "tests/unit/test_budget.py",  # 31 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Heaviest files first; the rest after them in their usual order (the sort is stable)."""
    rank = {path: i for i, path in enumerate(HEAVIEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


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

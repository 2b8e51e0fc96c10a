"""Fixtures for every test; the helpers they build on live in tests/helpers.py."""

from __future__ import annotations

import gc
import os
import sys

from playground import host

# On pytest-xdist's workers (scripts/test.sh runs two) each worker, and each process it starts, gets one CPU's
# worth of threads: two workers with a pool of every CPU each put twice as many spinning threads on the cores as
# there are cores (docs/benchmarks.md has what that cost). Set before torch starts its pool.
if os.environ.get("PYTEST_XDIST_WORKER"):
    host.apply_thread_limits(max(1, host.limits().cpus // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402

from tests.helpers import TINY_PROGRAM_OPTIONS, in_fast_lane, tiny_loaded  # noqa: E402

# The files that took longest in the full suite, heaviest first (docs/benchmarks.md, "The test suite's time", gives
# the run they come from). The workers take whole files in this order (the full suite passes
# --no-loadscope-reorder; xdist gives each worker two files in turn, then the next one whenever a worker is down
# to one): the default queue, by number of tests, left a long file to one worker at the end. The SmolLM2
# quantized-error file goes first, as it needs one bundled model only: the other worker's first file converts the
# other model meanwhile, where two files needing both would wait on one conversion.
HEAVIEST_FILES = (
    "tests/integration/test_jax_quantized_error.py",
    "tests/integration/test_presets.py",
    "tests/integration/test_bundled_grid.py",
    "tests/unit/test_jax_assisted.py",
    "tests/integration/test_browser.py",
    "tests/unit/test_jax_decoder.py",
    "tests/unit/test_on_a_mesh.py",
    "tests/unit/test_jax_caches.py",
    "tests/integration/test_browser_mechanics.py",
    "tests/unit/test_jax_int8.py",
    "tests/integration/test_browser_notices.py",
    "tests/integration/test_jax_assisted.py",
    "tests/unit/test_prefix_store_jax.py",
    "tests/integration/test_jax_decoder.py",
    "tests/integration/test_constraints_bundled.py",
    "tests/unit/test_token_probabilities.py",
    "tests/unit/test_jax_diverse_beam.py",
    "tests/integration/test_architecture_grid.py",
    "tests/integration/test_jax_beam.py",
    "tests/unit/test_jax_contrastive.py",
    "tests/unit/test_jax_q4.py",
    "tests/unit/test_jax_dola.py",
    "tests/integration/test_context.py",
    "tests/integration/test_browser_lab.py",
)


# The same for the fast lane (scripts/test.sh --fast), whose files weigh otherwise: its heaviest files by their
# fast tests' junit seconds in the quiet run of 2026-12-07 19:55 (docs/benchmarks.md). By number of tests,
# xdist's own order, a 13 s file came last and left a worker idle 15 s at the end.
HEAVIEST_FAST_FILES = (
    "tests/unit/test_jax_assisted.py",
    "tests/unit/test_sampler_lab.py",
    "tests/unit/test_step_mode.py",
    "tests/unit/test_jax_caches.py",
    "tests/unit/test_token_probabilities.py",
    "tests/unit/test_prefix_store_jax.py",
    "tests/unit/test_runner.py",
    "tests/unit/test_constraints.py",
    "tests/unit/test_jax_beam.py",
    "tests/unit/test_jax_decoder.py",
    "tests/unit/test_prefix_store_restored.py",
    "tests/unit/test_jax_beam_sample.py",
    "tests/unit/test_context.py",
    "tests/unit/test_kv_store.py",
    "tests/unit/test_architectures.py",
    "tests/unit/test_openai_api.py",
    "tests/unit/test_new_samplers.py",
    "tests/unit/test_jax_universal.py",
    "tests/unit/test_prefix_store.py",
    "tests/unit/test_constraint_limits.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Heaviest files first (the fast lane's own order where slow tests are left out); the rest after them in
    their usual order (the sort is stable)."""
    rank = {path: i for i, path in enumerate(HEAVIEST_FAST_FILES if in_fast_lane(config) else HEAVIEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move every object the test modules' imports made (torch, JAX, transformers, Gradio: over half a million)
    out of the garbage collector's reach, once they are all imported, so each full collection scans only what
    tests made. The tests collect often (the model cache collects whenever it drops models, around every tiny
    model a test loads), and a collection of the whole heap is slow. What tests make stays collectable, so a
    dropped model still frees its memory and its compiled programs."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="module")
def _programs_dropped_after_each_file() -> Iterator[None]:
    """When a file ends, the loaded models' engines drop their compiled programs.

    A worker keeps the bundled models loaded from file to file, and each engine kept every program it
    compiled: each is three memory mappings per kernel, and a worker that ran the bundled models' JAX files one
    after another went past the 75% of `vm.max_map_count` at which the program cache drops programs to stay
    clear of it (playground/backends/jax/engine/mappings.py), so a later test's repeated request compiled again and
    failed its "compiles nothing" assertion. Few programs are shared between files; the unit tests' tiny
    programs come back from the compile store (tests/shared_compiles.py)."""
    yield
    if "playground.backends.jax.engine.engine" not in sys.modules:
        return  # nothing ran on JAX in this process yet
    from playground.backends.jax.engine.engine import drop_programs
    from playground.models.loaded import LOADED

    drop_programs([loaded.model for loaded in LOADED.snapshot()])


@pytest.fixture
def tiny():
    return tiny_loaded()


@pytest.fixture
def tiny_programs_compile_at_o0(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JAX engine's programs compile at LLVM -O0 for the test (TINY_PROGRAM_OPTIONS).

    A tiny model's program is nearly all fixed compile cost, which -O0 cuts. The programs run slower and their
    floating-point results move in the last digits; the tiny models' parity tests pass either way (the fast lane
    runs them all at -O0). Every unit test takes it (tests/unit/conftest.py), and so do the integration tests of
    tiny models; the scripts the unit tests run in a fresh Python call tests.helpers.tiny_programs_at_o0. The
    bundled models' tests compile as users' processes do.
    """
    try:
        from playground.backends.jax.engine import engine
    except ImportError:  # no JAX: nothing compiles
        return
    for name, value in TINY_PROGRAM_OPTIONS.items():
        monkeypatch.setitem(engine.COMPILER_OPTIONS, name, value)


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

"""Fixtures for the unit tests, which run tiny random-weight models."""

from __future__ import annotations

import gc

import pytest

from tests.helpers import in_fast_lane
from tests.shared_compiles import SHARED


@pytest.fixture(autouse=True)
def _tiny_programs(tiny_programs_compile_at_o0: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every unit test's JAX programs compile at LLVM -O0, as the whole fast lane does (tests/conftest.py), and
    a program compiled by an earlier test of this process is not compiled again (tests/shared_compiles.py)."""
    SHARED.install(monkeypatch)


@pytest.fixture(autouse=True, scope="module")
def _frozen_before_each_file(request: pytest.FixtureRequest) -> None:
    """In the fast lane (a mark expression that leaves `slow` out), what is alive when a file starts leaves the
    garbage collector's reach, as the imports did after collection (tests/conftest.py).

    The libraries import much of themselves lazily, during the tests (a model class, generate's machinery, JAX's
    lowering rules): a few files in, a worker held 200,000 to 400,000 such objects, which every full collection
    scanned again, and the model cache collects whenever it drops a model (docs/benchmarks.md, "The fast lane's
    second cut", has what that cost). What is alive between two files is those modules, the compile store's
    executables and loaded tiny models, which hold no reference cycles: they still go when their last reference
    does. Only the fast lane does this; the full suite's bundled models stay the collector's, as in users'
    processes."""
    if not in_fast_lane(request.config):
        return
    gc.collect()
    gc.freeze()

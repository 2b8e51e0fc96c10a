"""Fixtures for the unit tests, which run tiny random-weight models."""

from __future__ import annotations

import pytest

from tests.shared_compiles import SHARED


@pytest.fixture(autouse=True)
def _tiny_programs(tiny_programs_compile_at_o0: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every unit test's JAX programs compile at LLVM -O0, as the whole fast lane does (tests/conftest.py), and
    a program compiled by an earlier test of this process is not compiled again (tests/shared_compiles.py)."""
    SHARED.install(monkeypatch)

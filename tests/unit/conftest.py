"""Fixtures for the unit tests, which run tiny random-weight models."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _tiny_programs(tiny_programs_compile_at_o0: None) -> None:
    """Every unit test's JAX programs compile at LLVM -O0, as the whole fast lane does (tests/conftest.py)."""

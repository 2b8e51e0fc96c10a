"""Fixtures for the unit tests, which run tiny random-weight models."""

from __future__ import annotations

import pytest

from tests.helpers import TINY_PROGRAM_OPTIONS


@pytest.fixture(autouse=True)
def _tiny_programs_compile_at_o0(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JAX engine's programs of a unit test compile at LLVM -O0, as the whole fast lane does.

    A tiny model's program is nearly all fixed compile cost, which -O0 cuts (tests/unit/test_jax_beam.py: 47.9 s
    -> 39.0 s). The programs run slower and their floating-point results move in the last digits; the tiny
    models' parity tests pass either way (the fast lane runs them all at -O0). The scripts the unit tests run in
    a fresh Python do the same (tests.helpers.tiny_programs_at_o0). The bundled models' tests, in
    tests/integration, compile as users' processes do.
    """
    try:
        from playground.backends.jax import engine
    except ImportError:  # no JAX: nothing compiles
        return
    for name, value in TINY_PROGRAM_OPTIONS.items():
        monkeypatch.setitem(engine.COMPILER_OPTIONS, name, value)

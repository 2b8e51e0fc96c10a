"""The test process's store of compiled programs (tests/shared_compiles.py) hands back an executable only for the
same program, and its results are that program's."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from playground.backends.jax.engine import program_cache
from playground.backends.jax.engine.mappings import mapping_limit
from tests.shared_compiles import SharedCompiles


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> SharedCompiles:
    store = SharedCompiles()
    store.install(monkeypatch)
    return store


def sorted_twice(x: jax.Array) -> jax.Array:
    return jnp.sort(x) * 2


def test_a_program_compiled_again_reuses_the_executable_and_computes_its_own_inputs(shared):
    x = jnp.arange(8.0)[::-1]
    first = jax.jit(sorted_twice).lower(x).compile()
    again = jax.jit(sorted_twice).lower(x).compile()
    assert shared.hits == 1
    np.testing.assert_array_equal(np.asarray(again(x + 1)), np.arange(1.0, 9.0) * 2)
    # an executable with a sort no longer serializes once run: its size is the one measured when compiled
    assert program_cache.program_bytes(again) == program_cache.program_bytes(first) > 0


def test_other_shapes_or_options_compile_anew(shared):
    def first_row(x: jax.Array, unused: jax.Array) -> jax.Array:  # `unused` is pruned from the program
        return x[0]

    x = jnp.zeros((2, 3))
    jax.jit(first_row).lower(x, jnp.zeros(4)).compile()
    other = jax.jit(first_row).lower(x, jnp.zeros(5)).compile()  # the same module text, other argument types
    jax.jit(first_row).lower(x, jnp.zeros(4)).compile({"xla_cpu_copy_insertion_use_region_analysis": True})
    assert shared.hits == 0
    assert other(x, jnp.zeros(5)).shape == (3,)


def scaled_sort(x: jax.Array, scale: float) -> jax.Array:
    return jnp.sort(x) * scale


def test_past_its_mappings_the_store_drops_the_least_recently_used():
    counts = iter([0, 400, 400, 900, 900, 1300])  # before and after each compile: 400, 500, 400 mappings held
    store = SharedCompiles(mappings_kept=1000, mappings=lambda: next(counts))
    x = jnp.arange(4.0)
    programs = [store.compile(jax.jit(partial(scaled_sort, scale=scale)).lower(x)) for scale in (1.0, 2.0, 3.0)]
    assert len(store._executables) == len(store._bytes) == 2 and store.mappings_held == 900  # the first went
    store.compile(jax.jit(partial(scaled_sort, scale=3.0)).lower(x))
    assert store.hits == 1
    assert [float(program(x)[1]) for program in programs] == [1.0, 2.0, 3.0]  # a dropped one still runs


@pytest.mark.skipif(mapping_limit() is None, reason="the system does not list memory mappings")
def test_a_kept_executable_holds_the_mappings_its_compile_added(shared):
    jax.jit(partial(scaled_sort, scale=5.0)).lower(jnp.arange(16.0)).compile()
    assert shared.mappings_held >= 3  # its kernel's code and data pages, at least

"""The process's memory mappings are counted against the kernel's limit, and the program cache gives way when
they are crowded: past the limit, XLA's next compile kills the process."""

from functools import partial

import pytest
import torch

from playground.backends.jax.engine import program_cache
from playground.backends.jax.engine.mappings import mapping_limit, mappings_crowded, mappings_in_use
from playground.backends.jax.engine.program_cache import ProgramCache
from playground.spec import RunSpec
from tests import shared_compiles
from tests.helpers import jax_run, tiny_llama, tiny_loaded

jax = pytest.importorskip("jax")
jnp = jax.numpy

linux_only = pytest.mark.skipif(mapping_limit() is None, reason="the system does not list memory mappings")


def sorts(x, scale):
    """Eight sorts, each a kernel of its own: a program with some dozen kernels."""
    for step in range(8):
        x = jnp.sort(jnp.tanh(x * (scale + step)), axis=-1)
    return x


@linux_only
def test_a_compiled_programs_kernels_hold_mappings_until_it_is_dropped(monkeypatch):
    monkeypatch.setattr(jax.stages.Lowered, "compile", shared_compiles.COMPILE)  # not kept by the test store
    before = mappings_in_use()
    program = jax.jit(partial(sorts, scale=3.0)).lower(jnp.ones((4, 16))).compile()
    held = mappings_in_use()
    del program
    assert held - before >= 16  # code and data pages per kernel
    assert mappings_in_use() < held


@linux_only
def test_crowding_is_a_share_of_the_limit():
    assert mappings_crowded(share=0.0)
    assert not mappings_crowded(share=1.0)


def test_crowded_mappings_drop_the_oldest_programs_until_they_are_not():
    answers = iter([True, True, False])
    cache = ProgramCache(bound=10**9, size=lambda program: 1, crowded=lambda: next(answers))
    for key in "abc":
        cache._programs[key] = (key, 1)
    cache.add("d", "d")
    assert list(cache._programs) == ["c", "d"] and cache.evictions == 2


def test_the_newest_program_stays_however_crowded():
    cache = ProgramCache(bound=10**9, size=lambda program: 1, crowded=lambda: True)
    cache.add("a", "a")
    cache.add("b", "b")
    assert list(cache._programs) == ["b"] and cache.evictions == 1


def test_an_engine_in_a_crowded_process_keeps_one_program_at_a_time_and_the_tokens_stay(monkeypatch):
    prompt = torch.tensor([[5, 17, 42, 99, 3]])
    spec = RunSpec(backend="jax", cache="dynamic", max_new_tokens=40, min_new_tokens=40)
    reference, _ = jax_run(tiny_loaded("tiny-llama-roomy", tiny_llama(seed=4)), prompt, spec)
    monkeypatch.setattr(program_cache, "mappings_crowded", lambda: True)
    crowded, _ = jax_run(tiny_loaded("tiny-llama-crowded", tiny_llama(seed=4)), prompt, spec)
    assert crowded.sequences == reference.sequences
    assert reference.extra["program_cache_evictions"] == 0
    assert crowded.extra["compiled_programs"] == 1 and crowded.extra["program_cache_evictions"] > 0

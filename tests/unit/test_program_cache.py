"""Compiled programs are kept up to a byte bound, least recently used dropped first; a dropped program is built
again when needed, and the tokens do not change."""

import os

import pytest
import torch

from playground.backends.jax.engine.program_cache import ProgramCache, program_bytes, program_cache_bound
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from tests.helpers import jax_run, run_script, tiny_llama, tiny_loaded

jax = pytest.importorskip("jax")

PROMPT = torch.tensor([[5, 17, 42, 99, 3]])


def test_the_least_recently_used_programs_go_first_and_the_newest_always_stays():
    cache = ProgramCache(bound=100, size=lambda program: program["bytes"])
    for key in "abc":
        cache.add(key, {"bytes": 40})
    assert list(cache._programs) == ["b", "c"] and cache.bytes == 80 and cache.evictions == 1
    assert cache.lookup("b") == {"bytes": 40}  # now the most recent
    cache.add("d", {"bytes": 40})
    assert list(cache._programs) == ["b", "d"] and cache.lookup("c") is None
    cache.add("huge", {"bytes": 500})  # past the bound on its own: kept, everything else dropped
    assert list(cache._programs) == ["huge"] and cache.bytes == 500 and cache.evictions == 4


def test_the_bound_is_read_from_the_environment_with_units(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_PROGRAM_CACHE", "512M")
    assert program_cache_bound() == 512 * 2**20
    monkeypatch.setenv("PLAYGROUND_PROGRAM_CACHE", "lots")
    with pytest.raises(PlaygroundError, match=r"PLAYGROUND_PROGRAM_CACHE='lots' is not a size"):
        program_cache_bound()


def test_a_compiled_program_has_a_size():
    compiled = jax.jit(lambda x: (x @ x).sum()).lower(jax.numpy.ones((64, 64))).compile()
    assert program_bytes(compiled) > 1000


def spec(**overrides) -> RunSpec:
    return RunSpec(**{"backend": "jax", "cache": "dynamic", "max_new_tokens": 70, "min_new_tokens": 70,
                      **overrides})


def test_a_bound_too_small_for_one_request_drops_programs_yet_the_tokens_stay(monkeypatch):
    kept = tiny_loaded("tiny-llama-kept", tiny_llama(seed=3))
    reference, _ = jax_run(kept, PROMPT, spec())  # a growing cache: prefill, start, a decode and grow per length
    assert reference.extra["program_cache_evictions"] == 0
    assert reference.extra["program_cache_bytes"] > 0

    monkeypatch.setenv("PLAYGROUND_PROGRAM_CACHE", "1")  # one byte: each new program drops every other
    squeezed = tiny_loaded("tiny-llama-squeezed", tiny_llama(seed=3))
    first, _ = jax_run(squeezed, PROMPT, spec())
    again, _ = jax_run(squeezed, PROMPT, spec())
    assert first.sequences == again.sequences == reference.sequences
    assert first.extra["compiled_programs"] == 1 and first.extra["program_cache_evictions"] > 0
    assert again.compile_s > 0  # its programs had been dropped, so they were built again
    assert first.extra["program_cache_bytes"] < reference.extra["program_cache_bytes"]


@pytest.mark.subprocess
def test_the_bound_holds_over_a_mix_of_shapes_and_a_dropped_program_reloads_from_disk(tmp_path):
    env = {**os.environ, "PLAYGROUND_CACHE": str(tmp_path), "PLAYGROUND_COMPILE_CACHE": "1", "JAX_PLATFORMS": "cpu",
           "PLAYGROUND_PROGRAM_CACHE": "24M"}  # a few of the tiny model's programs (~8 MiB each, as counted)
    report = run_script("program_cache_reload", env)
    kept = list(zip(report["kept_bytes"], report["kept_programs"], strict=True))
    assert all(size <= report["bound"] for size, count in kept if count > 1), kept  # one may be past it alone
    assert report["evictions"] > 0  # the mix did not fit: programs were dropped
    assert report["again_tokens"] == report["first_tokens"]
    # its programs had been dropped and came back (a request that finds all its programs kept reports 0 s) ...
    assert report["again_compile_s"] > 0
    assert report["written_by_again"] == []  # ... from the disk cache, not from XLA
    assert report["again_compile_s"] < report["first_compile_s"] / 2

"""The budget counts everything a run holds: torch weights, the JAX engine's device copies, the draft model;
the LRU evicts by those totals and refuses before anything is allocated."""

import re

import pytest
import torch

from playground import runner
from playground.errors import PlaygroundError
from playground.models import loaded, memory
from playground.spec import RunSpec
from tests.helpers import (
    allowed_tiny_model,
    new_device_bytes,
    save_tiny_model,
    tiny_gemma,
    tiny_llama,
)

jax = pytest.importorskip("jax")
from playground.backends.jax.engine import engine as jax_engine  # noqa: E402
from playground.backends.jax.engine.program_cache import program_cache_bound  # noqa: E402


def misaligned(model):
    """The model with every tensor moved 4 bytes off a 64-byte boundary, as weights read in place from a
    safetensors file are."""
    for tensor in list(model.parameters()) + list(model.buffers()):
        shifted = torch.empty(tensor.numel() + 1, dtype=tensor.dtype)[1:].view(tensor.shape)
        tensor.data = shifted.copy_(tensor.data)
    return model


@pytest.mark.parametrize(("make", "aligned"), [(tiny_llama, True), (tiny_llama, False), (tiny_gemma, True)])
def test_the_engine_estimate_is_what_the_engine_allocates(make, aligned):
    model = make() if aligned else misaligned(make())
    estimate = jax_engine.device_bytes(model, 1)
    engine, _ = jax_engine.engine_for(model, 1)
    assert estimate == new_device_bytes(engine, model)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    if aligned:  # only the fused q/k/v and gate/up matrices are new; the rest is shared through DLPack
        assert 0 < estimate < weights
    else:  # nothing can be shared: a full copy (tied embeddings once)
        assert estimate >= weights



def test_loaded_weights_are_aligned_so_the_engine_shares_them(tmp_path, monkeypatch):
    with allowed_tiny_model(monkeypatch, tmp_path / "m") as path:
        model, _ = loaded.LOADED.get(path)
        assert all(t.data_ptr() % 64 == 0 for t in model.model.parameters())
        assert jax_engine.device_bytes(model.model, 1) == jax_engine.device_bytes(tiny_llama(), 1)


@pytest.fixture
def two_models(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    loaded.LOADED.clear()
    yield [save_tiny_model(tmp_path / f"m{seed}", seed=seed) for seed in range(2)]
    loaded.LOADED.clear()


def test_reserving_an_engine_evicts_by_total_bytes(two_models, monkeypatch):
    size = memory.weight_bytes_estimate(tiny_llama().config, "fp32")
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", str(int(size * 2.5)))  # two models, or one and its engine
    lru = loaded.ModelLRU(capacity=5)
    first, _ = lru.get(two_models[0])
    lru.get(two_models[1])
    lru.reserve(first, "engine", size)
    assert [name for name, _ in lru.keys()] == [two_models[0]]  # the other model went to make room
    assert lru.resident_bytes() == first.weight_bytes + size
    lru.reserve(first, "engine", size)  # once per kind: nothing more is counted
    assert lru.resident_bytes() == first.weight_bytes + size


def test_an_engine_that_can_never_fit_is_refused_before_anything_is_evicted(two_models, monkeypatch):
    size = memory.weight_bytes_estimate(tiny_llama().config, "fp32")
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", str(int(size * 2.5)))
    lru = loaded.ModelLRU(capacity=5)
    first, _ = lru.get(two_models[0])
    lru.get(two_models[1])
    with pytest.raises(PlaygroundError, match=r"engine for .* needs about .* memory budget is free; use torch"):
        lru.reserve(first, "engine", 2 * size, hint="use torch")
    assert len(lru.keys()) == 2 and first.held == {}


def test_a_jax_run_counts_its_engine_in_the_budget(two_models):
    runner.run_to_result("abc", RunSpec(model=two_models[0], backend="jax", cache="static", max_new_tokens=4))
    (held,) = loaded.LOADED.keys()
    model = loaded.LOADED.get(*held)[0]
    engine, reused = jax_engine.engine_for(model.model, 1)
    programs = program_cache_bound()
    assert reused and model.held == {"the JAX engine's weights on 1 device": new_device_bytes(engine, model.model),
                                     "the JAX engine's compiled programs on 1 device": programs}
    assert loaded.LOADED.resident_bytes() == model.weight_bytes + new_device_bytes(engine, model.model) + programs


def test_a_jax_run_whose_engine_does_not_fit_is_refused_before_it_allocates(two_models, monkeypatch):
    size = memory.weight_bytes_estimate(tiny_llama().config, "fp32")
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", str(size + 1000))  # the weights fit, their engine does not
    created = []
    monkeypatch.setattr(jax_engine, "Engine", lambda *args: created.append(args))
    with pytest.raises(PlaygroundError, match=r"the JAX engine's weights on 1 device for .* use the torch backend"):
        runner.run_to_result("abc", RunSpec(model=two_models[0], backend="jax", cache="static", max_new_tokens=4))
    assert created == []


@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
def test_a_jax_cache_is_counted_at_the_lengths_it_is_allocated_at(two_models, monkeypatch):
    config = tiny_llama().config
    engine = jax_engine.device_bytes(tiny_llama(), 1)
    monkeypatch.setenv("PLAYGROUND_PROGRAM_CACHE", "1M")  # counted too: programs past it are dropped, not refused
    fits_256 = (memory.weight_bytes_estimate(config, "fp32") + engine + 2**20
                + memory.kv_bytes_estimate(config, 256))
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", str(fits_256 + 100))
    spec = RunSpec(model=two_models[0], backend="jax", cache="static", max_new_tokens=4, chat=False)
    runner.run_to_result("abc", spec)  # a 64-position cache
    runner.run_to_result("abc", spec.replace(max_new_tokens=180))  # static: 3 + 180 -> 192 positions, preallocated
    with pytest.raises(PlaygroundError, match=r"the JAX static cache for 303 tokens needs about .* lower "
                                              r"max_new_tokens"):
        runner.run_to_result("abc", spec.replace(max_new_tokens=300))  # 320 positions
    with pytest.raises(PlaygroundError, match=r"the JAX dynamic cache for 253 tokens \(old and new arrays while it "
                                              r"grows\) .* lower max_new_tokens"):
        runner.run_to_result("abc", spec.replace(cache="dynamic", max_new_tokens=250))  # 128 and 256 at once
    # a beam search's cache holds a row per beam: 4 x 64 positions fit, 8 x 64 do not
    runner.run_to_result("abc", spec.replace(strategy="beam", num_beams=4))
    with pytest.raises(PlaygroundError, match=r"the JAX static cache for 7 tokens x 8 beams needs about"):
        runner.run_to_result("abc", spec.replace(strategy="beam", num_beams=8))
    # a bounded cache is counted at its bound: a window of 64 fits however long the run
    runner.run_to_result("abc", spec.replace(cache="sliding", window=64, max_new_tokens=300, min_new_tokens=300))


def test_a_draft_model_counts_in_the_budget(tmp_path, monkeypatch):
    with allowed_tiny_model(monkeypatch, tmp_path / "main") as main:
        draft = save_tiny_model(tmp_path / "draft", seed=1)
        spec = RunSpec(model=main, strategy="assisted", assistant=draft, max_new_tokens=4)
        runner.run_to_result("abc", spec)
        both = [loaded.LOADED.get(name)[0].weight_bytes for name in (main, draft)]
        assert loaded.LOADED.resident_bytes() == sum(both)
        loaded.LOADED.clear()
        monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", str(int(both[0] * 1.5)))  # the main model, not both
        with pytest.raises(PlaygroundError, match=rf"model {re.escape(draft)} \(fp32\) needs about .* memory budget"):
            runner.run_to_result("abc", spec)

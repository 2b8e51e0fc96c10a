"""Memory budget: estimates match what gets allocated, the LRU stays within budget, oversize requests are refused."""

import re

import pytest

from playground import runner
from playground.errors import PlaygroundError
from playground.models import loaded, memory
from playground.spec import RunSpec
from tests.helpers import save_tiny_model, tiny_gemma, tiny_llama, tiny_loaded, torch_run


@pytest.mark.parametrize(("raw", "expected"), [("1048576", 2**20), ("8G", 8 * 2**30), ("1.5GiB", int(1.5 * 2**30)),
                                               ("512m", 512 * 2**20)])
def test_budget_parses_sizes(monkeypatch, raw, expected):
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", raw)
    assert memory.budget_bytes() == expected


def test_a_budget_that_is_not_a_size_is_refused(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", "lots")
    with pytest.raises(PlaygroundError, match="is not a size"):
        memory.budget_bytes()


def test_weight_estimate_matches_the_loaded_model():
    model = tiny_llama()
    estimate = memory.weight_bytes_estimate(model.config, "fp32")
    assert estimate == sum(p.numel() * 4 for p in model.parameters())
    assert memory.weight_bytes_estimate(model.config, "nf4") < estimate / 2


@pytest.mark.parametrize("make", [tiny_llama, tiny_gemma])
def test_kv_estimate_matches_a_dynamic_cache_at_the_same_length(make):
    loaded = tiny_loaded(model=make())
    prompt = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
    import torch

    out, _ = torch_run(loaded, torch.tensor(prompt), RunSpec(max_new_tokens=21))
    fed = len(prompt[0]) + 21 - 1  # the last token is never fed back
    estimate = memory.kv_bytes_estimate(loaded.model.config, fed)
    # exact for full layers; a dynamic sliding layer holds window - 1 positions, the bound counts window
    sliding_layers = sum(t == "sliding_attention" for t in getattr(loaded.model.config, "layer_types", None) or [])
    assert 0 <= estimate - out.kv_cache_bytes == sliding_layers * 2 * 2 * 16 * 4


@pytest.fixture
def three_models(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    return [save_tiny_model(tmp_path / f"m{seed}", seed=seed) for seed in range(3)]


def test_loading_three_models_in_turn_stays_within_the_budget(three_models, monkeypatch):
    size = memory.weight_bytes_estimate(tiny_llama().config, "fp32")
    budget = int(size * 2.5)
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", str(budget))
    lru = loaded.ModelLRU(capacity=10)
    for path in three_models:
        lru.get(path)
        assert lru.resident_bytes() <= budget
    assert [name for name, _ in lru.keys()] == three_models[1:]  # the first was evicted


def test_a_model_larger_than_the_budget_is_refused(three_models, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", "1000")
    with pytest.raises(PlaygroundError, match=r"model .* needs about .* memory budget"):
        loaded.ModelLRU(capacity=2).get(three_models[0])


def test_a_cache_that_would_not_fit_is_refused_before_generating(three_models, monkeypatch):
    size = memory.weight_bytes_estimate(tiny_llama().config, "fp32")
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", str(size + 100_000))
    loaded.LOADED.clear()
    try:
        runner.run_to_result("abc", RunSpec(model=three_models[0], max_new_tokens=8))  # 11 tokens: fits
        with pytest.raises(PlaygroundError, match=r"the KV cache for 1003 tokens x 4 sequence\(s\)") as refused:
            runner.run_to_result("abc", RunSpec(model=three_models[0], strategy="beam", max_new_tokens=1000))
        # a tiny model's few hundred KiB read in KiB or MiB, not "0.00 GiB"
        assert "0.00 GiB" not in str(refused.value) and re.search(r"needs about [\d.]+ (KiB|MiB)", str(refused.value))
    finally:
        loaded.LOADED.clear()


def test_context_length_is_enforced(three_models, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_TOKENS", "5000")
    loaded.LOADED.clear()
    try:
        with pytest.raises(PlaygroundError, match=r"= 4524 exceeds .*'s context of 4096 tokens"):
            runner.run_to_result("x" * 3500, RunSpec(model=three_models[0], max_new_tokens=1024))
    finally:
        loaded.LOADED.clear()


def test_sizes_in_a_refusal_take_the_unit_they_fill():
    assert [memory.size_text(n) for n in (512, 12 * 2**10, int(4.2 * 2**20), int(1.5 * 2**30))] == [
        "512 B", "12 KiB", "4.2 MiB", "1.50 GiB"]

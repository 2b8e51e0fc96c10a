"""Faults on the bundled models: a half-written conversion is noticed and redone."""

import shutil

import pytest

from playground.models import convert, loaded
from playground.models.paths import converted_dir


@pytest.mark.slow
def test_a_half_written_conversion_is_redone(tmp_path, monkeypatch):
    loaded.LOADED.get("smollm2-135m")  # converted once in the usual cache (if no test has yet) and copied from it
    shutil.copytree(converted_dir() / "smollm2-135m", tmp_path / "models" / "smollm2-135m")
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    assert convert.is_converted("smollm2-135m")
    lru = loaded.ModelLRU(1)
    weights = tmp_path / "models" / "smollm2-135m" / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as f:  # a writer killed half-way
        f.truncate(size // 2)
    assert not convert.is_converted("smollm2-135m")
    lru.clear()
    model, _ = lru.get("smollm2-135m")
    assert convert.is_converted("smollm2-135m") and weights.stat().st_size == size
    ids = model.tokenizer("The capital of France is", return_tensors="pt").input_ids
    out = model.model.generate(ids, max_new_tokens=4, do_sample=False)
    assert "Paris" in model.tokenizer.decode(out[0, ids.shape[1]:])

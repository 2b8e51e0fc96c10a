"""The JAX prefill in chunks (backends/jax/engine/prefill.py) gives what the whole-prompt forward gives, on every cache.

A chunk of 8 tokens against a 40-token prompt (a 64-token bucket: five chunks run, the sixth and later are the
bucket's padding and never run) crosses a sliding window of 6 (narrower than a chunk) and of 16, a sink cache's
sinks and its recent ring, the quantized cache's residual ring, and Gemma3's own window of 8.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("torchax")
pytest.importorskip("jax")

import jax  # noqa: E402

from playground.backends.jax.caches import plan as cache_plan  # noqa: E402
from playground.backends.jax.engine import prefill  # noqa: E402
from playground.backends.jax.engine.engine import engine_for  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import fast_lane_keeps, jax_run, tiny_gemma, tiny_llama, tiny_loaded  # noqa: E402

PROMPT = (torch.arange(1, 41) * 7 % 250).tolist()  # 40 tokens
CHUNK = 8
NEW = 12

CACHES = [
    {"cache": "dynamic"},
    {"cache": "static"},
    {"cache": "sliding", "window": 6},
    {"cache": "sliding", "window": 16},
    {"cache": "sink", "window": 12, "sink_tokens": 4},
    {"cache": "sink", "window": 16, "sink_tokens": 0},
    {"cache": "quantized", "cache_bits": 4, "residual_length": 8},
    {"cache": "quantized", "cache_bits": 8},
]


@pytest.fixture(scope="module")
def llama():
    return tiny_loaded("tiny-llama-prefill", tiny_llama(hidden_size=128, num_attention_heads=2,
                                                        num_key_value_heads=1))


@pytest.fixture(scope="module")
def gemma():
    return tiny_loaded("tiny-gemma-prefill", tiny_gemma(sliding_window=8))


def _prefilled(loaded, spec: RunSpec, chunk: int, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, list]:
    """The prefill program's last logits and the cache's arrays, with prompts run `chunk` tokens at a time."""
    monkeypatch.setattr(prefill, "CHUNK_TOKENS", chunk)
    engine, _ = engine_for(loaded.model, 1)
    bucket = cache_plan.prefill_bucket(len(PROMPT))
    layouts = cache_plan.plan_cache(spec, engine.config, len(PROMPT), 8).at(cache_plan.static_length(len(PROMPT), 8))
    padded = np.zeros((1, bucket), np.int32)
    padded[0, :len(PROMPT)] = PROMPT
    logits, cache = engine.prefill_program(bucket, layouts).result()(engine.weights, engine.put(padded),
                                                                      engine.put(np.int32(len(PROMPT))))
    counters = {int(layer.cumulative_length) for layer in cache.jax_layers}
    assert counters == {len(PROMPT)}  # decoding continues at the true length
    return np.asarray(logits), [np.asarray(a) for a in jax.tree.leaves(cache)]


# the fast lane keeps the window narrower than a chunk (the staged ring); the full suite runs every cache
@pytest.mark.parametrize("knobs", fast_lane_keeps(CACHES, keep=2), ids=lambda k: "-".join(str(v) for v in k.values()))
def test_chunks_leave_the_logits_and_cache_of_the_whole_prompt(llama, knobs, monkeypatch):
    spec = RunSpec(backend="jax", max_new_tokens=8, **knobs)
    whole_logits, whole_cache = _prefilled(llama, spec, 512, monkeypatch)
    chunked_logits, chunked_cache = _prefilled(llama, spec, CHUNK, monkeypatch)
    np.testing.assert_allclose(chunked_logits, whole_logits, atol=2e-5, rtol=1e-4)
    assert len(chunked_cache) == len(whole_cache)
    for chunked, whole in zip(chunked_cache, whole_cache, strict=True):
        assert chunked.shape == whole.shape and chunked.dtype == whole.dtype
        if chunked.ndim == 4:  # (B, KV, slots, ...): a slot past the prompt holds padding, masked until written
            chunked, whole = chunked[:, :, :len(PROMPT)], whole[:, :, :len(PROMPT)]
        if chunked.dtype == np.uint8:  # quantized codes: a rounding step apart at most, where one differs
            assert np.mean(chunked != whole) < 0.01
        else:
            np.testing.assert_allclose(chunked, whole, atol=2e-5, rtol=1e-4)


# a bf16 store rounds each key and value as it writes it, and the whole prompt attends over them rounded: so must the
# chunks, over the staged ring (a difference in a stored value is a whole bf16 step, far past the tolerance)
# the fast lane: the sliding ring, the window the check above keeps (the sink ring's chunks: the full suite's)
@pytest.mark.parametrize("knobs", fast_lane_keeps([{"cache": "sliding", "window": 6, "cache_dtype": "bf16"},
                                                   {"cache": "sink", "window": 12, "sink_tokens": 4,
                                                    "cache_dtype": "bf16"}]),
                         ids=lambda k: "-".join(str(v) for v in k.values()))
def test_chunks_over_a_bf16_store_attend_over_its_rounded_keys(llama, knobs, monkeypatch):
    test_chunks_leave_the_logits_and_cache_of_the_whole_prompt(llama, knobs, monkeypatch)


def _tokens(loaded, spec: RunSpec, chunk: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setattr(prefill, "CHUNK_TOKENS", chunk)
    out, _ = jax_run(loaded, PROMPT, spec)
    return out.sequences[0]


# the full suite: each cache and strategy end to end; the fast lane's check is the logits and cache test above
@pytest.mark.slow
@pytest.mark.parametrize(("model", "knobs"), [
    ("llama", {"cache": "sliding", "window": 6}),
    ("llama", {"cache": "sink", "window": 12, "sink_tokens": 4}),
    ("llama", {"cache": "quantized", "cache_bits": 4, "residual_length": 8}),
    ("gemma", {"cache": "static"}),
    ("gemma", {"cache": "sliding"}),
    ("llama", {"cache": "dynamic", "strategy": "contrastive", "top_k": 4, "penalty_alpha": 0.6}),
    ("llama", {"cache": "dynamic", "strategy": "dola", "dola_layers": "high"}),
    ("llama", {"cache": "static", "strategy": "beam", "num_beams": 3}),
    ("llama", {"cache": "sliding", "window": 6, "strategy": "assisted", "prompt_lookup": 3}),
])
def test_a_prompt_longer_than_a_chunk_gives_the_tokens_of_the_whole_prompt(model, knobs, request, monkeypatch):
    loaded = request.getfixturevalue(model)
    spec = RunSpec(backend="jax", max_new_tokens=NEW, min_new_tokens=NEW, **knobs)
    whole = _tokens(loaded, spec, 512, monkeypatch)
    assert _tokens(loaded, spec, CHUNK, monkeypatch) == whole
    assert len(whole) == NEW


def test_staging_reuses_a_global_ring_long_enough_and_stages_the_rest():
    from playground.backends.jax.caches.ring import RingLayout

    global_ring = RingLayout(1, 16, slots=128)
    assert prefill.staging(global_ring, 64) is global_ring
    assert prefill.staging(RingLayout(1, 16, slots=32), 64) == RingLayout(1, 16, slots=64)
    assert prefill.staging(RingLayout(1, 16, slots=6, window=6), 64) == RingLayout(1, 16, slots=64, window=6)
    # a bf16 store's staged prompt is rounded as the store rounds it
    assert prefill.staging(RingLayout(1, 16, slots=32, dtype="bfloat16"), 64).dtype == "bfloat16"


def test_the_memory_estimate_counts_a_chunks_attention_and_the_staged_prompt(llama):
    from playground.backends.jax.backend import JaxBackend

    heads, bucket = llama.model.config.num_attention_heads, 4096
    whole_scores = 2 * heads * bucket * bucket * 4
    static = JaxBackend().memory_needed(llama, RunSpec(backend="jax", cache="static", max_new_tokens=8), 4000, None)
    chunk_scores = 2 * heads * 512 * (bucket + 512) * 4
    assert "prefill's" in static.run.what  # a tiny model's cache is smaller than its prompt's attention
    assert chunk_scores < static.run.bytes < whole_scores / 4
    sink = JaxBackend().memory_needed(llama, RunSpec(backend="jax", cache="sink", window=64, max_new_tokens=8),
                                      4000, None)
    config = llama.model.config
    staged = config.num_hidden_layers * 2 * config.num_key_value_heads * 64 * bucket * 4  # head size 64, fp32
    assert sink.run.bytes >= staged + chunk_scores

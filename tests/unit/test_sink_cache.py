"""SinkCache: bounded length, sinks kept, exact re-rotation, and StreamingLLM-equal logits on tiny models."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, LlamaConfig
from transformers.generation.streamers import BaseStreamer
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from playground.backends.rope import rope_inv_freq
from playground.backends.torch.caches.sink import SinkCache, SinkLayer, rotate_keys
from tests.helpers import one_layer_llama, tiny_gemma, tiny_llama


def rope(config: LlamaConfig, raw: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Keys rotated exactly as the model rotates them: raw (B, H, T, D) at positions (T,)."""
    cos, sin = LlamaRotaryEmbedding(config)(raw, positions[None])  # (1, T, D)
    _, keys = apply_rotary_pos_emb(raw, raw, cos, sin)
    return keys  # (B, H, T, D)


class KeyLengthWatcher(BaseStreamer):
    """Records the longest per-layer key length after every generate step."""

    def __init__(self, cache: SinkCache) -> None:
        self.cache, self.lengths = cache, []

    def put(self, value: torch.Tensor) -> None:
        self.lengths.append(max(layer.stored_length() for layer in self.cache.layers))

    def end(self) -> None:
        pass


def test_rotate_keys_moves_keys_between_positions():
    config = tiny_llama().config
    torch.manual_seed(0)
    raw = torch.randn(2, 2, 5, 16)  # (B, H, T, D)
    positions = torch.tensor([3, 10, 50, 400, 1000])  # the model's own fp32 angles drift further out
    at_p = rope(config, raw, positions)
    inv_freq = rope_inv_freq(config)
    for d in (1, 3, 64):
        torch.testing.assert_close(rotate_keys(at_p, -d, inv_freq), rope(config, raw, positions - d),
                                   atol=2e-4, rtol=1e-4)
        torch.testing.assert_close(rotate_keys(at_p, d, inv_freq), rope(config, raw, positions + d),
                                   atol=2e-4, rtol=1e-4)


def test_one_eviction_stores_keys_as_computed_fresh_at_their_new_positions():
    config = tiny_llama().config
    window, sinks = 6, 2
    layer = SinkLayer(window, sinks, rope_inv_freq(config))
    torch.manual_seed(0)
    raw_k, raw_v = torch.randn(1, 2, 7, 16), torch.randn(1, 2, 7, 16)  # (B, H, T, D)
    positions = torch.arange(7)
    layer.update(rope(config, raw_k[:, :, :6], positions[:6]), raw_v[:, :, :6])
    assert layer.get_mask_sizes(1) == (window, 1)
    keys, values = layer.update(rope(config, raw_k[:, :, 6:], positions[6:]), raw_v[:, :, 6:])
    kept = [0, 1, 3, 4, 5, 6]  # token 2, the oldest non-sink, is evicted
    # the sinks moved one position forward, so the cache is a contiguous run 1..6 ending at the new token
    torch.testing.assert_close(keys, rope(config, raw_k[:, :, kept], torch.arange(1, 7)), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, raw_v[:, :, kept])
    assert layer.keys.shape[-2] == window and layer.get_seq_length() == 7 and layer.evicted == 1


def test_logits_equal_streaming_llm_recompute_of_the_kept_tokens():
    model = one_layer_llama(vocab_size=128)
    window, sinks, prompt_len = 8, 2, 20  # prompt longer than the window: the chunked-eviction path too
    prompt = torch.randint(0, 128, (1, prompt_len), generator=torch.Generator().manual_seed(1))
    out = model.generate(prompt, past_key_values=SinkCache(model.config, window, sinks), max_new_tokens=24,
                         do_sample=False, output_logits=True, return_dict_in_generate=True)
    history = out.sequences[0].tolist()
    with torch.no_grad():
        torch.testing.assert_close(out.logits[0][0], model(prompt).logits[0, -1], atol=1e-4, rtol=1e-4)
        for step in range(1, len(out.logits)):
            seen = history[: prompt_len + step]
            kept = seen[:sinks] + seen[-(window - sinks):]  # StreamingLLM: sinks + recent, positions 0..W-1
            reference = model(torch.tensor([kept])).logits[0, -1]
            torch.testing.assert_close(out.logits[step][0], reference, atol=1e-4, rtol=1e-4)


def test_generating_three_windows_stays_bounded_and_keeps_the_sinks():
    model = tiny_llama()
    window, sinks, new = 16, 4, 48
    prompt = torch.randint(0, 256, (1, 10), generator=torch.Generator().manual_seed(2))
    cache = SinkCache(model.config, window_length=window, num_sink_tokens=sinks)
    watcher = KeyLengthWatcher(cache)
    out = model.generate(prompt, past_key_values=cache, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                         streamer=watcher)
    assert out.shape == (1, 10 + new)
    assert max(watcher.lengths) == window and len(watcher.lengths) == new + 1
    assert cache.get_seq_length() == 10 + new - 1  # the last token is sampled, never fed back
    with torch.no_grad():
        reference = DynamicCache(config=model.config)
        model(prompt, past_key_values=reference)
    for layer, fresh in zip(cache.layers, reference.layers, strict=True):
        assert layer.keys.shape[-2] == layer.values.shape[-2] == window
        torch.testing.assert_close(layer.values[:, :, :sinks], fresh.values[:, :, :sinks])
        # the stored sinks are the first keys moved forward by the evicted count: moving them back restores them
        back = rotate_keys(layer.keys[:, :, :sinks], -layer.evicted, layer.inv_freq)
        torch.testing.assert_close(back, fresh.keys[:, :, :sinks], atol=1e-5, rtol=1e-5)


def test_sampling_and_beam_search_run_past_the_window():
    model = tiny_llama()
    prompt = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(3))
    cache = SinkCache(model.config, 12, 2)
    torch.manual_seed(0)
    out = model.generate(prompt, past_key_values=cache, max_new_tokens=36, min_new_tokens=36, do_sample=True,
                         top_k=20, num_return_sequences=2)
    assert out.shape == (2, 42) and all(layer.keys.shape == (2, 2, 12, 16) for layer in cache.layers)
    cache = SinkCache(model.config, 12, 2)
    out = model.generate(prompt, past_key_values=cache, max_new_tokens=36, min_new_tokens=36, num_beams=2)
    assert out.shape == (1, 42) and all(layer.keys.shape[-2] == 12 for layer in cache.layers)


def test_crop_after_eviction_only_under_past_recording():
    model = tiny_llama()
    cache = SinkCache(model.config, 8, 2)
    with torch.no_grad():
        model(torch.randint(0, 256, (1, 6)), past_key_values=cache)
        cache.crop(-2)
        assert cache.get_seq_length() == 4 and cache.layers[0].keys.shape[-2] == 4
        model(torch.randint(0, 256, (1, 6)), past_key_values=cache)
    with pytest.raises(RuntimeError, match="roll back"):
        cache.crop(-1)


def test_rejects_what_it_cannot_rerotate():
    with pytest.raises(ValueError, match=r"gemma3_text.*sliding"):
        SinkCache(tiny_gemma().config, 16, 4)
    dynamic = LlamaConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                          rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})
    with pytest.raises(ValueError, match="rope_type='dynamic'"):
        SinkCache(dynamic, 16, 4)
    with pytest.raises(ValueError, match="num_sink_tokens"):
        SinkCache(tiny_llama().config, 4, 4)

"""Sliding-window caches: old tokens really stop mattering, memory stays bounded, other caches are untouched."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, LlamaConfig
from transformers.masking_utils import eager_mask, sdpa_mask

from playground.backends.torch.caches.sliding import (
    SlidingWindowCache,
    WindowedOffset,
    make_sliding_cache,
    windowed_mask,
)
from tests.helpers import one_layer_llama, tiny_gemma, tiny_llama

WINDOW = 6


def generated_logits(model, ids: torch.Tensor, cache) -> torch.Tensor:
    """Greedy logits of the prefill and 5 decode steps, (6, vocab)."""
    out = model.generate(ids, past_key_values=cache, max_new_tokens=6, min_new_tokens=6, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)
    return torch.stack(out.logits)[:, 0]


def with_token_changed(ids: torch.Tensor, index: int) -> torch.Tensor:
    changed = ids.clone()
    changed[0, index] = (changed[0, index] + 1) % 256
    return changed


PROMPT = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("max_cache_len", [None, 64])
def test_window_hides_tokens_beyond_its_reach(max_cache_len):
    model = tiny_llama()  # 2 layers: a token reaches 2 * (W - 1) positions back, as in Mistral
    base = generated_logits(model, PROMPT, make_sliding_cache(model, WINDOW, max_cache_len))
    far = with_token_changed(PROMPT, 40 - 1 - 2 * WINDOW)  # 12 back from the last prompt token
    near = with_token_changed(PROMPT, 40 - 3)
    torch.testing.assert_close(generated_logits(model, far, make_sliding_cache(model, WINDOW, max_cache_len)), base)
    assert not torch.allclose(generated_logits(model, near, make_sliding_cache(model, WINDOW, max_cache_len)), base)
    full = generated_logits(model, PROMPT, DynamicCache(config=model.config))
    assert not torch.allclose(generated_logits(model, far, DynamicCache(config=model.config)), full)


def test_one_layer_sees_exactly_the_last_window_tokens():
    model = one_layer_llama()
    base = generated_logits(model, PROMPT, make_sliding_cache(model, WINDOW))
    outside = with_token_changed(PROMPT, 40 - 1 - WINDOW)  # W back: just outside
    inside = with_token_changed(PROMPT, 40 - WINDOW)  # W - 1 back: the oldest token the last one still sees
    torch.testing.assert_close(generated_logits(model, outside, make_sliding_cache(model, WINDOW)), base)
    changed = generated_logits(model, inside, make_sliding_cache(model, WINDOW))
    assert not torch.allclose(changed[0], base[0])


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("max_cache_len", [None, 40])
def test_equals_a_full_forward_under_a_band_mask(attention, max_cache_len):
    model = tiny_llama()
    model.set_attn_implementation(attention)
    prompt = PROMPT[:, :20]
    out = model.generate(prompt, past_key_values=make_sliding_cache(model, WINDOW, max_cache_len), max_new_tokens=8,
                         min_new_tokens=8, do_sample=False, output_logits=True, return_dict_in_generate=True)
    index = torch.arange(out.sequences.shape[1])
    band = (index[None] <= index[:, None]) & (index[None] > index[:, None] - WINDOW)  # (T, T) query x key
    mask = band if attention == "sdpa" else torch.where(band, 0.0, torch.finfo(torch.float32).min)
    with torch.no_grad():
        reference = model(out.sequences, attention_mask=mask[None, None]).logits[0, 19:-1]
    torch.testing.assert_close(torch.stack(out.logits)[:, 0], reference, atol=1e-4, rtol=1e-4)


def test_imposed_cache_is_bounded_and_reports_its_window():
    model = tiny_llama()
    cache = make_sliding_cache(model, WINDOW)
    model.generate(PROMPT, past_key_values=cache, max_new_tokens=10, min_new_tokens=10, do_sample=False)
    assert (cache.window, cache.native) == (WINDOW, False)
    assert all(layer.keys.shape[-2] == WINDOW - 1 for layer in cache.layers)  # + the new token = W
    assert cache.get_seq_length() == 40 + 10 - 1


def test_native_model_keeps_its_own_window():
    model = tiny_gemma(sliding_window=8)
    cache = make_sliding_cache(model, window=3, max_cache_len=None)
    assert (cache.window, cache.native) == (8, True)
    assert [type(layer).__name__ for layer in cache.layers] == [
        "DynamicSlidingWindowLayer", "DynamicLayer", "DynamicSlidingWindowLayer"]
    ours = generated_logits(model, PROMPT[:, :20], cache)
    torch.testing.assert_close(ours, generated_logits(model, PROMPT[:, :20], DynamicCache(config=model.config)))
    static = make_sliding_cache(model, window=3, max_cache_len=32)
    assert static.window == 8 and static.layers[0].max_cache_len == 8


@pytest.mark.parametrize("backend", [sdpa_mask, eager_mask])
def test_wrapped_masks_change_nothing_without_a_window(backend):
    padding = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    args = dict(batch_size=1, q_length=3, kv_length=8, q_offset=5, kv_offset=0, attention_mask=padding)
    torch.testing.assert_close(windowed_mask(backend)(**args), backend(**args))
    windowed = windowed_mask(backend)(**{**args, "kv_offset": WindowedOffset(0, 4)})
    assert not torch.equal(windowed, backend(**args))


def test_other_caches_still_get_plain_causal_attention():
    model = tiny_llama()
    make_sliding_cache(model, WINDOW)  # installs the wrapped masks for the whole process
    out = model.generate(PROMPT, max_new_tokens=4, min_new_tokens=4, do_sample=False, output_logits=True,
                         return_dict_in_generate=True)
    with torch.no_grad():
        reference = model(out.sequences).logits[0, 39:-1]
    torch.testing.assert_close(torch.stack(out.logits)[:, 0], reference, atol=1e-4, rtol=1e-4)


def test_refuses_what_it_cannot_window():
    model = tiny_llama()
    with pytest.raises(ValueError, match="window"):
        make_sliding_cache(model, 0)
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1)
    config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="sdpa or eager"):
        SlidingWindowCache(config, WINDOW)


def test_window_survives_a_later_plain_registration_of_the_mask_backend():
    from transformers.masking_utils import AttentionMaskInterface

    model = one_layer_llama()
    base = generated_logits(model, PROMPT, make_sliding_cache(model, WINDOW))
    cache = make_sliding_cache(model, WINDOW)
    AttentionMaskInterface.register("sdpa", sdpa_mask)  # e.g. another library resetting the backend
    torch.testing.assert_close(generated_logits(model, with_token_changed(PROMPT, 40 - 1 - WINDOW), cache), base)

"""The retention strip's rules against the real caches: after each step, the positions whose keys a cache
holds (found by comparing stored key vectors with each position's own keys) are the ones the rules say."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import Cache, DynamicLayer

from playground.backends.rope import rope_inv_freq
from playground.backends.torch.caches.factory import make_cache
from playground.backends.torch.caches.sink import rotate_keys
from playground.backends.torch.transformers_hooks import with_attention_mask
from playground.result import attention_layers
from playground.retention import CacheSettings, VerifyPass, retention, verify_retention
from playground.spec import RunSpec
from tests.helpers import tiny_gemma, tiny_llama

PROMPT, NEW = 12, 22
TOKENS = torch.randint(0, 256, (1, PROMPT + NEW), generator=torch.Generator().manual_seed(3))


def reference_keys(model) -> list[torch.Tensor]:
    """Every layer's keys at every position (H, T, D), from one pass with layers that never drop anything; the
    model's own masks still apply its sliding windows, so Gemma3's global layers see what they see in a run."""
    cache = Cache(layers=[DynamicLayer() for _ in range(model.config.num_hidden_layers)])
    with torch.no_grad():
        model(TOKENS, past_key_values=cache)
    return [layer.keys[0] for layer in cache.layers]


def held_positions(stored: torch.Tensor, reference: torch.Tensor) -> list[int]:
    """The position of each stored key (H, L, D) among the reference keys (H, T, D); -1 where none matches."""
    found = []
    for slot in range(stored.shape[1]):
        matches = [p for p in range(reference.shape[1])
                   if torch.allclose(stored[:, slot], reference[:, p], atol=1e-5)]
        found.append(matches[0] if len(matches) == 1 else -1)
    return found


def steps(model, cache):
    """Prefill the prompt, then one token per step; yields (step, cache) after each forward pass."""
    with torch.no_grad():
        model(TOKENS[:, :PROMPT], past_key_values=cache)
        yield 1, cache
        for k in range(2, NEW + 1):
            position = PROMPT + k - 2  # new token k-1 is written by the pass that produces token k
            model(TOKENS[:, position:position + 1], past_key_values=cache)
            yield k, cache


def expected(spec: RunSpec, model, step: int):
    layout = attention_layers(model)
    settings = CacheSettings(cache=spec.cache, window=spec.window, sink_tokens=spec.sink_tokens,
                             cache_bits=spec.cache_bits, residual_length=spec.residual_length,
                             layer_types=tuple(layout["layer_types"]), model_window=layout["sliding_window"])
    return retention(settings, PROMPT, NEW, step)


def positions(states, *wanted) -> list[int]:
    return [i for i, state in enumerate(states) if state in wanted]


@pytest.mark.parametrize("window", [1, 6, 40])
def test_sliding_window_holds_the_positions_the_strip_shows(window):
    model, spec = tiny_llama(), RunSpec(cache="sliding", window=window)
    reference = reference_keys(model)[0]  # the first layer's keys depend only on the token and its position
    for step, cache in steps(model, make_cache(spec, model, PROMPT)):
        [row] = expected(spec, model, step)
        assert held_positions(cache.layers[0].keys[0], reference) == positions(row.states, "kept")
        assert all(layer.keys.shape[-2] == len(positions(row.states, "kept")) for layer in cache.layers)
        assert positions(row.states, "unwritten")[0] == PROMPT + step - 1


def test_sink_cache_holds_its_sinks_and_the_recent_window():
    model, spec = tiny_llama(), RunSpec(cache="sink", window=8, sink_tokens=3)
    reference = reference_keys(model)[0]
    inv_freq = rope_inv_freq(model.config)
    saw_eviction = False
    for step, cache in steps(model, make_cache(spec, model, PROMPT)):
        [row] = expected(spec, model, step)
        layer = cache.layers[0]
        sinks = positions(row.states, "sink")
        # the sinks are stored rotated forward by the number of evicted tokens
        moved = rotate_keys(reference[None, :, :3], layer.evicted, inv_freq)[0]
        assert held_positions(layer.keys[0, :, :3], moved) == sinks
        assert held_positions(layer.keys[0, :, 3:], reference) == positions(row.states, "kept")
        assert layer.evicted == len(positions(row.states, "evicted"))
        saw_eviction = saw_eviction or layer.evicted > 0
    assert saw_eviction


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_cache_keeps_its_residual_in_full_precision(bits):
    model, spec = tiny_llama(), RunSpec(cache="quantized", cache_bits=bits, residual_length=4)
    reference = reference_keys(model)[0]
    for step, cache in steps(model, make_cache(spec, model, PROMPT)):
        [row] = expected(spec, model, step)
        full, quantized = positions(row.states, "kept"), positions(row.states, "quantized")
        layer = cache.layers[0]
        residual = layer.keys[0] if layer.keys is not None and layer.keys.dim() == 4 else torch.empty(2, 0, 16)
        assert held_positions(residual, reference) == full
        packed = layer._quantized_keys[0] if bits == 8 else layer._quantized_keys
        assert packed.shape[-2] == len(quantized)
        assert len(full) + len(quantized) == PROMPT + step - 1


@pytest.mark.parametrize("cache", ["sliding", "quantized"])
def test_gemma3_sliding_layers_keep_the_models_window_and_global_layers_their_row(cache):
    model, spec = tiny_gemma(sliding_window=8), RunSpec(cache=cache, cache_bits=4, residual_length=4)
    reference = reference_keys(model)
    for step, held in steps(model, make_cache(spec, model, PROMPT)):
        slide_row, global_row = expected(spec, model, step)
        assert slide_row.layers.startswith("2 sliding layers") and global_row.layers.startswith("1 global layer")
        # sliding layers; after a quantized global layer the last one's keys carry its rounding, so only its length
        for index in (0, 2) if cache == "sliding" else (0,):
            stored = held.layers[index].keys[0]
            assert held_positions(stored, reference[index]) == positions(slide_row.states, "kept")
        assert held.layers[2].keys.shape[-2] == len(positions(slide_row.states, "kept"))
        global_layer = held.layers[1]
        if cache == "sliding":
            assert held_positions(global_layer.keys[0], reference[1]) == positions(global_row.states, "kept")
        else:
            assert global_layer._quantized_keys.shape[-2] == len(positions(global_row.states, "quantized"))
            residual = global_layer.keys
            assert (residual.shape[-2] if residual.dim() == 4 else 0) == len(positions(global_row.states, "kept"))


@pytest.mark.parametrize(("cache", "after"), [("sliding", 9), ("sink", 9), ("sliding", 1), ("sliding", 0)])
def test_a_verify_pass_holds_its_drafts_past_the_window_until_rollback(cache, after):
    """A verify pass with 5 drafts after `after` new tokens (the first pass feeds the prompt, the others the
    last new token): the cache holds what the strip shows, drafts included (accepted or not: the keys are
    written before the main model judges them)."""
    model, spec = tiny_llama(), RunSpec(cache=cache, window=8, sink_tokens=3)
    reference = reference_keys(model)[0]
    settings = CacheSettings(cache=cache, window=8, sink_tokens=3)
    cache_object = make_cache(spec, model, PROMPT)
    for step, _ in steps(model, cache_object) if after else ():
        if step == after:
            break
    for layer in cache_object.layers:
        layer.activate_past_recording()
    start, end = (PROMPT + after - 1, PROMPT + after) if after else (0, PROMPT)  # what the pass feeds
    masks = cache_object.block_mask if cache == "sink" else lambda _: None  # the sink cache's per-query windows
    with torch.no_grad(), with_attention_mask(model, cache_object, masks):
        model(input_ids=TOKENS[:, start:end + 5], past_key_values=cache_object)
    [row] = verify_retention(settings, PROMPT, NEW, VerifyPass(before=after, drafted=5, accepted=2))
    assert positions(row.states, "accepted") == [end, end + 1]
    assert positions(row.states, "rejected") == [end + 2, end + 3, end + 4]
    layer = cache_object.layers[0]
    stored = layer.keys[0, :, 3:] if cache == "sink" else layer.keys[0]
    assert held_positions(stored, reference) == positions(row.states, "kept", "accepted", "rejected")
    assert bool(positions(row.states, "evicted")) == (after > 0), "past the window: some positions evicted"


def test_other_caches_are_not_drawn():
    with pytest.raises(ValueError, match="retention is drawn for caches"):
        retention(CacheSettings(cache="dynamic"), 4, 4, 1)

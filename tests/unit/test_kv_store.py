"""Keys and values quantized to bits of their own, and the full-precision caches stored in bf16, on both backends.

A Llama with head size 64 (quanto's groups of 64 are one token's head on the PyTorch side, as on JAX), the
context command's quality measure (teacher-forced KL against the fp32 dynamic cache) on a 161-token text, and the
byte counts each store's shapes say.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground.context.quality import measure_quality  # noqa: E402
from playground.errors import PlaygroundError  # noqa: E402
from playground.retention import CacheSettings, Written, quantized_rows  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import fast_lane_keeps, jax_run, tiny_llama, tiny_loaded, torch_run  # noqa: E402

NAME = "tiny-llama-kv-store"
TEXT = [i * 37 % 251 for i in range(1, 162)]  # 161 token ids: 160 positions scored
PROMPT = torch.tensor([[5, 17, 42, 99, 3]])
NEW = 40
LAYERS, KV_HEADS, HEAD_DIM = 2, 1, 64


@pytest.fixture(scope="module")
def llama():
    return tiny_loaded(NAME, tiny_llama(hidden_size=128, num_attention_heads=2, num_key_value_heads=1))


def quality(llama, backend: str, cache: str, **knobs) -> dict:
    spec = RunSpec(model=NAME, backend=backend, cache=cache, **knobs)
    return measure_quality(llama, spec, TEXT, lambda message: None, buckets=5, chunk=48)


def run(llama, backend: str, **knobs):
    spec = RunSpec(backend=backend, max_new_tokens=NEW, min_new_tokens=NEW, **knobs)
    return (jax_run if backend == "jax" else torch_run)(llama, PROMPT, spec)[0]


# -- what each backend's quantizer takes -------------------------------------------------------------------------

@pytest.mark.parametrize(("knobs", "named"), [
    ({"cache_key_bits": 8, "cache_value_bits": 2}, "cache_key_bits=8 with cache_value_bits=2"),
    ({"cache_bits": 8, "cache_value_bits": 4}, "cache_bits=8 with cache_value_bits=4"),
    ({"cache_bits": 2, "cache_key_bits": 8}, "cache_key_bits=8 with cache_bits=2"),
])
def test_pytorch_refuses_8_bits_beside_2_or_4_naming_what_it_takes(knobs, named):
    with pytest.raises(PlaygroundError) as refused:
        RunSpec(cache="quantized", backend="torch", **knobs)
    message = str(refused.value)
    assert message.startswith(named + " cannot run on backend torch")
    assert "torch takes key and value bits of 2 or 4 apart, or 8 for both" in message
    assert "backend jax takes 2, 4, 8 apart" in message
    RunSpec(cache="quantized", backend="jax", **knobs)  # JAX's own quantizer has them


@pytest.mark.parametrize("knobs", [{"cache_key_bits": 3}, {"cache_value_bits": 16}, {"cache_dtype": "fp16"}])
def test_values_no_quantizer_has_are_refused_by_the_spec(knobs):
    with pytest.raises(PlaygroundError, match=f"{next(iter(knobs))} .* is not one of"):
        RunSpec(cache="quantized", backend="jax", **knobs)


def test_a_bf16_store_on_bf16_weights_is_refused():
    with pytest.raises(PlaygroundError, match="with weights='bf16' they are bfloat16 already"):
        RunSpec(cache="dynamic", weights="bf16", cache_dtype="bf16")


def test_the_spec_and_the_result_carry_the_knobs():
    spec = RunSpec(cache="quantized", backend="jax", cache_key_bits=8, cache_value_bits=2)
    assert {k: spec.to_dict()[k] for k in ("cache_key_bits", "cache_value_bits", "cache_dtype")} == {
        "cache_key_bits": 8, "cache_value_bits": 2, "cache_dtype": "fp32"}
    assert RunSpec.from_dict(spec.to_dict()) == spec


# -- key and value bits apart ------------------------------------------------------------------------------------

def test_8_bit_keys_and_2_bit_values_hold_the_bytes_their_bits_say_on_jax(llama):
    out = run(llama, "jax", cache="quantized", cache_key_bits=8, cache_value_bits=2, residual_length=16)
    store = 64  # 5 + 40 positions, rounded up to the growing cache's length
    scale_and_zero = 2 * 4  # one group of 64 channels: an fp32 scale and zero point per token and head
    keys, values = HEAD_DIM * 8 // 8 + scale_and_zero, HEAD_DIM * 2 // 8 + scale_and_zero
    residual = 2 * 16 * HEAD_DIM * 4  # the newest 16 keys and values in fp32
    assert out.kv_cache_bytes == LAYERS * KV_HEADS * (store * (keys + values) + residual)
    assert out.extra["cache_layers"] == {"quant(key_bits=8, value_bits=2, store=64, residual=16, slots=16)": LAYERS}
    same = run(llama, "jax", cache="quantized", cache_bits=8, residual_length=16)
    assert same.kv_cache_bytes == LAYERS * KV_HEADS * store * 2 * (HEAD_DIM + scale_and_zero)  # 8/8: no residual


@pytest.mark.slow  # four quantized JAX caches through the context command: the fast lane keeps the bytes check above
def test_fewer_value_bits_lose_more_through_the_context_command(llama):
    """KL(full || cache) grows as the bits fall, each side on its own, and 8/2 is not 8/8."""
    kl = {bits: quality(llama, "jax", "quantized", cache_key_bits=bits[0], cache_value_bits=bits[1],
                        residual_length=16)["kl_vs_full"] for bits in ((8, 8), (8, 4), (8, 2), (2, 8))}
    assert 0 < kl[(8, 8)] < kl[(8, 4)] < kl[(8, 2)]
    assert kl[(8, 8)] < kl[(2, 8)]
    assert kl[(8, 2)] > 10 * kl[(8, 8)]


@pytest.mark.slow  # quanto builds its CPU kernels for the PyTorch side (about a minute and a half on 2 cores)
def test_pytorch_packs_4_bit_keys_and_2_bit_values_and_agrees_with_jax(llama):
    """Both backends quantize 2 and 4 bits by quanto's rule (groups of 64, min-max, a float zero point), so the
    perplexity through them agrees; their 8 bits differ (fp8 per tensor against 8-bit groups), so 8 is left out."""
    from playground.backends.torch.caches.factory import kv_bytes, make_quantized_cache

    cache = make_quantized_cache(llama.model.config, 4, residual_length=16, value_bits=2)
    keys, values = torch.randn(1, KV_HEADS, 64, HEAD_DIM), torch.randn(1, KV_HEADS, 64, HEAD_DIM)
    cache.update(keys, values, 0)  # 64 tokens into the first layer: quantized as they arrive
    scale_and_shift = 64 * 2 * 4  # one group of 64 channels per token: an fp32 scale and shift
    assert kv_bytes(cache) == (64 * HEAD_DIM * 4 // 8 + scale_and_shift) + (64 * HEAD_DIM * 2 // 8 + scale_and_shift)
    knobs = {"cache_key_bits": 4, "cache_value_bits": 2, "residual_length": 16}
    on_torch, on_jax = quality(llama, "torch", "quantized", **knobs), quality(llama, "jax", "quantized", **knobs)
    assert on_jax["ppl"] == pytest.approx(on_torch["ppl"], rel=0.01)
    four = quality(llama, "torch", "quantized", cache_bits=4, residual_length=16)
    assert on_torch["kl_vs_full"] > four["kl_vs_full"] > 0


def test_the_strip_names_each_sides_bits():
    settings = CacheSettings(cache="quantized", cache_bits=4, cache_key_bits=8, cache_value_bits=2, residual_length=4)
    at = Written(settings=settings, prompt_tokens=5, total=12, n=10, sliding=0, full=2)
    [row] = quantized_rows(at)
    assert row.layers == "2 layers (8-bit keys, 2-bit values)"
    assert row.states.count("kept") == 1  # PyTorch's rule: a residual, since only one side takes 8 bits


# -- a bf16 store for the full-precision caches ------------------------------------------------------------------

@pytest.mark.slow  # eight runs a cache: the fast lane's bf16 check is the loss test below (fp32 would lose nothing)
@pytest.mark.parametrize(("cache", "knobs"), [("dynamic", {}), ("static", {}), ("sliding", {"window": 8}),
                                               ("sink", {"window": 8, "sink_tokens": 2})])
def test_a_bf16_store_halves_the_bytes_on_both_backends_which_agree(llama, cache, knobs):
    outputs = {(backend, dtype): run(llama, backend, cache=cache, cache_dtype=dtype, **knobs)
               for backend in ("torch", "jax") for dtype in ("fp32", "bf16")}
    for backend in ("torch", "jax"):
        # the PyTorch sink cache also holds the model's RoPE frequencies (HEAD_DIM / 2 in fp32), whatever it stores
        rope = HEAD_DIM // 2 * 4 if (backend, cache) == ("torch", "sink") else 0
        half, full = (outputs[backend, dtype].kv_cache_bytes - rope for dtype in ("bf16", "fp32"))
        assert half * 2 == full
    assert outputs["jax", "bf16"].sequences == outputs["torch", "bf16"].sequences


@pytest.mark.parametrize(("cache", "knobs"), fast_lane_keeps([("dynamic", {}),
                                                              ("sink", {"window": 32, "sink_tokens": 4})]))
def test_a_bf16_store_loses_little_and_the_backends_agree(llama, cache, knobs):
    on_torch = quality(llama, "torch", cache, cache_dtype="bf16", **knobs)
    on_jax = quality(llama, "jax", cache, cache_dtype="bf16", **knobs)
    if cache == "dynamic":  # against the fp32 dynamic cache: small, but not nothing
        assert 0 < on_torch["kl_vs_full"] < 1e-4 and 0 < on_jax["kl_vs_full"] < 1e-4
        assert on_torch["top1_vs_full"] > 0.97
    assert on_jax["ppl"] == pytest.approx(on_torch["ppl"], rel=1e-3)
    assert on_jax["kl_vs_full"] == pytest.approx(on_torch["kl_vs_full"], rel=0.2)


# -- the page ----------------------------------------------------------------------------------------------------

def test_the_card_shows_each_knob_with_its_cache_and_says_what_each_backend_takes():
    from playground.ui.card_groups import store_knob_states
    from playground.ui.columns import visibility

    for cache in ("dynamic", "static", "sliding", "sink"):
        shown = visibility("greedy", cache, "torch")
        assert shown["dtype_knobs"] and not shown["bits_knobs"]
    shown = visibility("greedy", "quantized", "jax")
    assert shown["bits_knobs"] and not shown["dtype_knobs"]
    usable, info = store_knob_states("torch", "bf16")["cache_dtype"]
    assert not usable and "off with bf16 weights" in info
    assert store_knob_states("jax", "fp32")["cache_dtype"][0]
    assert "on torch 2 or 4 each" in store_knob_states("torch", "fp32")["cache_key_bits"][1]
    assert "on jax 2, 4 or 8 each" in store_knob_states("jax", "fp32")["cache_value_bits"][1]

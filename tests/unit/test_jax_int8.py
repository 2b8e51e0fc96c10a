"""int8 weights on the JAX path: the product equals the dequantized matrix's, the decoder gives the tokens and
logits of a torch model holding exactly those weights, every cache and strategy runs, the budget counts the
int8 bytes, and each matrix is quantized once (then read from disk)."""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
import torch
from torch import nn

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from playground.backends.jax.engine import engine as jax_engine  # noqa: E402
from playground.backends.jax.engine import int8, int8_store  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import (  # noqa: E402
    allowed_tiny_model,
    fast_lane_keeps,
    jax_run,
    jax_teacher_forced,
    new_device_bytes,
    tiny_gemma,
    tiny_llama,
    tiny_loaded,
    torch_greedy,
    torch_run,
)

PROMPT = torch.tensor([[5, 17, 42, 99, 3, 5, 17, 42, 99, 3]])  # repeats itself: prompt lookup finds drafts
NEW = 24


def dequantized(model: nn.Module) -> nn.Module:
    """A torch copy whose every linear layer (the output head too, untied) holds the weights the int8 engine
    stands for: the same int8 rows times the same scales, in fp32."""
    copied = copy.deepcopy(model)
    for child in list(copied.modules()):
        if type(child) is nn.Linear:
            q, scale = int8.quantize_rows(child.weight.detach().numpy())
            child.weight = nn.Parameter(torch.from_numpy(int8.dequantize_rows(q, scale)))
    return copied


@functools.cache
def tiny(which: str):
    """This file's own tiny models (a Llama, a Gemma3 whose sliding window of 8 is crossed), built once."""
    made = tiny_llama() if which == "llama" else tiny_gemma(sliding_window=8)
    return tiny_loaded(f"tiny-{which}-int8", made)


@pytest.fixture
def llama():
    return tiny("llama")


def spec(**overrides) -> RunSpec:
    values = {"backend": "jax", "cache": "static", "weights": "int8", "max_new_tokens": NEW, "min_new_tokens": NEW}
    return RunSpec(**{**values, **overrides})


# -- the product ---------------------------------------------------------------------------------------------

# the fast lane: one row on each shape (the rows are flattened into one product; the shape picks its path)
@pytest.mark.parametrize("rows", fast_lane_keeps([1, 3, 11]))
@pytest.mark.parametrize("shape", [(512, 48), (257, 32), (12288, 16)])  # blocks of 256, inline (prime), of 4096
def test_the_product_is_the_dequantized_matrix_product(rows, shape):
    rng = np.random.default_rng(rows)
    weight = rng.standard_normal(shape).astype(np.float32)
    q, scale = int8.quantize_rows(weight)
    x = rng.standard_normal((rows, 1, shape[1])).astype(np.float32)
    got = jax.jit(int8.product)(jnp.asarray(x), jnp.asarray(q), jnp.asarray(scale))
    want = x @ int8.dequantize_rows(q, scale).T
    assert got.shape == (rows, 1, shape[0])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    # and within the quantization bound of the fp32 product: half a step per weight, |x| summed
    bound = (np.abs(x) @ np.broadcast_to(scale[None] / 2, (shape[1], shape[0]))) + 1e-4
    assert np.all(np.abs(np.asarray(got) - x @ weight.T) <= bound)


def test_blocks_divide_the_rows_and_stay_in_the_block_bound():
    assert int8.block_rows(49152) == 4096 and int8.block_rows(576) == 288 and int8.block_rows(257) is None
    for rows in (96, 576, 960, 3072, 262144):
        block = int8.block_rows(rows)
        assert block is not None and rows % block == 0 and rows // block >= 2 and block <= int8.BLOCK_ROWS


# -- the decoder ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cache", ["static", "dynamic"])
@pytest.mark.parametrize("which", fast_lane_keeps(["llama", "gemma"]))  # the fast lane: Llama; the full suite: both
def test_greedy_matches_a_torch_model_holding_the_same_int8_weights(which, cache):
    loaded = tiny(which)
    out, _ = jax_run(loaded, PROMPT, spec(cache=cache))
    assert out.sequences[0] == torch_greedy(dequantized(loaded.model), PROMPT, NEW, "dynamic")
    assert out.extra["device_weights"] == "int8"
    assert out.weight_bytes == out.extra["device_weight_bytes"]


@pytest.mark.slow  # teacher-forced thrice: the fast lane checks int8 by greedy against the same weights in PyTorch
@pytest.mark.parametrize("which", ["llama", "gemma"])
def test_logits_are_the_dequantized_models_and_near_fp32(which):
    loaded = tiny(which)
    forced = torch_greedy(loaded.model, PROMPT, 12, "dynamic")
    jax_int8 = jax_teacher_forced(loaded, spec(), PROMPT, forced)
    reference = tiny_loaded(which, dequantized(loaded.model))
    torch_int8 = jax_teacher_forced(reference, spec(weights="fp32"), PROMPT, forced)
    assert torch.allclose(jax_int8, torch_int8, atol=2e-4)
    fp32 = jax_teacher_forced(loaded, spec(weights="fp32"), PROMPT, forced)
    assert 0 < (jax_int8 - fp32).abs().max() < 0.05  # quantized, and close


@pytest.mark.slow  # four strategies' programs per cache: full suite only
# the full suite runs the growing cache (and test_jax_q4.py the quantized one under 4-bit weights); the static,
# quantized, sliding and sink ones are extended (the weights are read the same way whatever the cache: each
# cache's layouts under every strategy are tested on fp32)
@pytest.mark.parametrize("cache", ["dynamic", pytest.param("static", marks=pytest.mark.extended),
                                   pytest.param("quantized", marks=pytest.mark.extended),
                                   pytest.param("sliding", marks=pytest.mark.extended),
                                   pytest.param("sink", marks=pytest.mark.extended)])
def test_every_cache_and_strategy_runs_with_int8(llama, cache):
    bounded = {"window": 12} if cache in ("sliding", "sink") else {}
    greedy, _ = jax_run(llama, PROMPT, spec(cache=cache, **bounded))
    assisted, _ = jax_run(llama, PROMPT, spec(cache=cache, strategy="assisted", prompt_lookup=3, **bounded))
    assert assisted.sequences[0] == greedy.sequences[0]
    assert assisted.forward_passes < NEW  # drafts were accepted
    sampled_a, _ = jax_run(llama, PROMPT, spec(cache=cache, strategy="sampling", seed=3, **bounded))
    sampled_b, _ = jax_run(llama, PROMPT, spec(cache=cache, strategy="sampling", seed=3, **bounded))
    assert sampled_a.sequences == sampled_b.sequences
    beam, _ = jax_run(llama, PROMPT, spec(cache=cache, strategy="beam", num_beams=3, **bounded))
    assert len(beam.sequences[0]) == NEW


@pytest.mark.slow  # beam's programs on int8 weights: the fast lane checks greedy on them, and beam in test_jax_beam
def test_beam_search_matches_transformers_on_the_same_int8_weights(llama):
    out, _ = jax_run(llama, PROMPT, spec(strategy="beam", num_beams=3, cache="dynamic"))
    reference = tiny_loaded("tiny-llama", dequantized(llama.model))
    want, _ = torch_run(reference, PROMPT, RunSpec(strategy="beam", num_beams=3, max_new_tokens=NEW,
                                                   min_new_tokens=NEW))
    assert out.sequences[0] == want.sequences[0]


@pytest.mark.slow  # a sliding window's int8 programs: the fast lane's repeat check is test_jax_decoder's
def test_a_repeated_request_compiles_nothing(llama):
    jax_run(llama, PROMPT, spec(cache="sliding", window=12))
    again, _ = jax_run(llama, PROMPT, spec(cache="sliding", window=12))
    assert again.compile_s == 0.0


# -- memory and the store ------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [tiny_llama, tiny_gemma])
def test_the_budget_counts_the_int8_bytes_the_engine_allocates(make):
    model = make()
    estimate = jax_engine.device_bytes(model, 1, "int8")
    engine, _ = jax_engine.engine_for(model, 1, "int8")
    assert estimate == new_device_bytes(engine, model)
    linear = sum(m.weight.numel() for m in model.modules() if type(m) is nn.Linear)
    assert estimate < jax_engine.device_bytes(model, 1, "fp32") + linear  # a byte a weight, not four
    assert all(engine.weights[name].dtype == jnp.int8 for name in engine.twin.companions)
    # no fp32 copy of a quantized matrix: an fp32 array of that shape is the model's own (its tied embedding)
    shapes = {engine.weights[name].shape for name in engine.twin.companions}
    own = {t.data_ptr() for t in model.parameters()}
    assert all(a.unsafe_buffer_pointer() in own for a in engine.weights.values()
               if a.dtype == jnp.float32 and a.shape in shapes)


@pytest.mark.slow  # a saved model through the runner: the fast lane checks the int8 bytes the budget counts
def test_the_budget_admits_int8_where_fp32_would_not_fit(tmp_path, monkeypatch):
    from playground import runner
    from playground.errors import PlaygroundError
    from playground.models import loaded as loaded_models
    from playground.models import memory

    model = tiny_llama()
    fp32, small = jax_engine.device_bytes(model, 1), jax_engine.device_bytes(model, 1, "int8")
    assert small < fp32
    monkeypatch.setenv("PLAYGROUND_PROGRAM_CACHE", "1")  # counted too; a program past it is dropped, not refused
    budget = memory.weight_bytes_estimate(model.config, "fp32") + 1 + (fp32 + small) // 2
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", str(budget))
    with allowed_tiny_model(monkeypatch, tmp_path / "m") as path:
        loaded_models.LOADED.clear()
        with pytest.raises(PlaygroundError, match="the JAX engine's weights on 1 device for"):
            runner.run_to_result("abc", spec(model=path, weights="fp32", max_new_tokens=4, min_new_tokens=0))
        loaded_models.LOADED.clear()
        result = runner.run_to_result("abc", spec(model=path, max_new_tokens=4, min_new_tokens=0))
        assert result["metrics"]["weight_bytes"] < memory.weight_bytes_estimate(model.config, "fp32")
    loaded_models.LOADED.clear()


def test_a_matrix_is_quantized_once_then_read_from_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    weight = np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)
    q, scale = int8_store.quantized(weight)
    assert list(tmp_path.glob("jax-int8/*.npz"))
    monkeypatch.setattr(int8_store, "quantize_rows", lambda _: pytest.fail("quantized again"))
    q2, scale2 = int8_store.quantized(weight.copy())
    assert np.array_equal(q, q2) and np.array_equal(scale, scale2)
    changed = weight.copy()
    changed[0, 0] += 1.0
    assert int8_store.digest(changed) != int8_store.digest(weight)

"""4-bit weights (q4) on the JAX path: the packing is exact and Q4_1 blocks survive it, the product equals the
dequantized matrix's, the decoder gives the tokens of a torch model holding exactly those weights, the caches and
strategies run, the budget counts the 4-bit bytes, PyTorch and meshes refuse it in one line."""

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
from playground.backends.jax.engine import int8, int8_store, q4  # noqa: E402
from playground.errors import PlaygroundError  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import (  # noqa: E402
    fast_lane_keeps,
    jax_run,
    jax_teacher_forced,
    new_device_bytes,
    tiny_gemma,
    tiny_llama,
    tiny_loaded,
    torch_greedy,
)

PROMPT = torch.tensor([[5, 17, 42, 99, 3, 5, 17, 42, 99, 3]])  # repeats itself: prompt lookup finds drafts
NEW = 24


def dequantized(model: nn.Module) -> nn.Module:
    """A torch copy whose every linear layer holds the weights q4 stands for, and whose output head (untied) holds
    int8's."""
    copied = copy.deepcopy(model)
    head = copied.get_output_embeddings()
    for child in list(copied.modules()):
        if type(child) is nn.Linear:
            weight = child.weight.detach().numpy()
            back = int8.dequantize_rows(*int8.quantize_rows(weight)) if child is head else \
                q4.dequantize_groups(*q4.quantize_groups(weight), rows=weight.shape[0])
            child.weight = nn.Parameter(torch.from_numpy(back))
    return copied


@functools.cache
def tiny(which: str):
    made = tiny_llama() if which == "llama" else tiny_gemma(sliding_window=8)
    return tiny_loaded(f"tiny-{which}-q4", made)


def spec(**overrides) -> RunSpec:
    values = {"backend": "jax", "cache": "static", "weights": "q4", "max_new_tokens": NEW, "min_new_tokens": NEW}
    return RunSpec(**{**values, **overrides})


# -- the layout and the product ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(6, 64), (7, 32), (257, 96)])  # an odd row count is padded with a zero row
def test_quantizing_keeps_each_group_within_half_a_step(shape):
    weight = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    packed, scale, minimum = q4.quantize_groups(weight)
    rows = shape[0] + shape[0] % 2
    assert packed.shape == (rows // 2, shape[1]) and packed.dtype == np.uint8
    assert scale.shape == minimum.shape == (rows, shape[1] // q4.GROUP)
    back = q4.dequantize_groups(packed, scale, minimum, shape[0])
    step = np.repeat(scale[: shape[0]], q4.GROUP, axis=1)
    assert np.all(np.abs(back - weight) <= step / 2 + 1e-6)


def test_q4_1_blocks_are_recovered_exactly():
    """Weights dequantized from Q4_1 blocks (a scale and a minimum in fp16, the group's min and max hitting 0 and
    15) quantize back to the same values: the bundled file's 4-bit layers keep their own blocks."""
    rng = np.random.default_rng(2)
    q = rng.integers(0, 16, (8, 64)).astype(np.float32)
    q[:, ::32], q[:, 1::32] = 0, 15  # llama.cpp's Q4_1 maps each group's min to 0 and its max to 15
    d = rng.random((8, 2)).astype(np.float16).astype(np.float32) / 100
    m = -rng.random((8, 2)).astype(np.float16).astype(np.float32) / 10
    from_file = (q.reshape(8, 2, 32) * d[..., None] + m[..., None]).reshape(8, 64)
    back = q4.dequantize_groups(*q4.quantize_groups(from_file), rows=8)
    np.testing.assert_allclose(back, from_file, rtol=0, atol=1e-7)


# the fast lane: one row on each shape (the rows are flattened into one product; the shape picks its path)
@pytest.mark.parametrize("rows", fast_lane_keeps([1, 3]))
@pytest.mark.parametrize("shape", [(512, 64), (257, 32), (8194, 32)])  # blocks, an odd count inline, 2 blocks
def test_the_product_is_the_dequantized_matrix_product(rows, shape):
    rng = np.random.default_rng(rows)
    weight = rng.standard_normal(shape).astype(np.float32)
    arrays = q4.quantize_groups(weight)
    x = rng.standard_normal((rows, 1, shape[1])).astype(np.float32)
    got = jax.jit(q4.product, static_argnums=(4,))(jnp.asarray(x), *map(jnp.asarray, arrays), shape[0])
    assert got.shape == (rows, 1, shape[0])
    np.testing.assert_allclose(np.asarray(got), x @ q4.dequantize_groups(*arrays, rows=shape[0]).T, rtol=1e-4,
                               atol=1e-4)


# -- the decoder ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", fast_lane_keeps(["llama", "gemma"]))  # the fast lane: Llama; the full suite: both
def test_greedy_matches_a_torch_model_holding_the_same_4bit_weights(which):
    loaded = tiny(which)
    out, _ = jax_run(loaded, PROMPT, spec(cache="dynamic"))
    assert out.sequences[0] == torch_greedy(dequantized(loaded.model), PROMPT, NEW, "dynamic")
    assert out.extra["device_weights"] == "q4"


@pytest.mark.slow  # teacher-forced thrice: the fast lane checks q4 by greedy against the same weights in PyTorch
def test_logits_are_the_dequantized_models_and_near_fp32():
    loaded = tiny("llama")
    forced = torch_greedy(loaded.model, PROMPT, 12, "dynamic")
    jax_q4 = jax_teacher_forced(loaded, spec(), PROMPT, forced)
    reference = tiny_loaded("llama", dequantized(loaded.model))
    torch_q4 = jax_teacher_forced(reference, spec(weights="fp32"), PROMPT, forced)
    assert torch.allclose(jax_q4, torch_q4, atol=2e-4)
    fp32 = jax_teacher_forced(loaded, spec(weights="fp32"), PROMPT, forced)
    assert 0 < (jax_q4 - fp32).abs().max() < 0.5  # quantized, and close


@pytest.mark.slow  # three strategies' programs per cache: full suite only
# the full suite runs the quantized cache; the sliding and sink ones are extended (as for int8)
@pytest.mark.parametrize("cache", ["quantized", pytest.param("sliding", marks=pytest.mark.extended),
                                   pytest.param("sink", marks=pytest.mark.extended)])
def test_caches_and_strategies_run_with_q4(cache):
    loaded = tiny("llama")
    bounded = {"window": 12} if cache in ("sliding", "sink") else {}
    greedy, _ = jax_run(loaded, PROMPT, spec(cache=cache, **bounded))
    assisted, _ = jax_run(loaded, PROMPT, spec(cache=cache, strategy="assisted", prompt_lookup=3, **bounded))
    assert assisted.sequences[0] == greedy.sequences[0]
    sampled_a, _ = jax_run(loaded, PROMPT, spec(cache=cache, strategy="sampling", seed=3, **bounded))
    sampled_b, _ = jax_run(loaded, PROMPT, spec(cache=cache, strategy="sampling", seed=3, **bounded))
    assert sampled_a.sequences == sampled_b.sequences
    if cache == "quantized":
        beam, _ = jax_run(loaded, PROMPT, spec(cache=cache, strategy="beam", num_beams=3))
        assert len(beam.sequences[0]) == NEW


# -- memory, the store and refusals --------------------------------------------------------------------------

def test_the_budget_counts_the_4bit_bytes_the_engine_allocates():
    model = tiny_llama()
    estimate = jax_engine.device_bytes(model, 1, "q4")
    engine, _ = jax_engine.engine_for(model, 1, "q4")
    assert estimate == new_device_bytes(engine, model)
    assert estimate < jax_engine.device_bytes(model, 1, "int8")
    kinds = {engine.weights[name].dtype for name in engine.twin.companions}
    assert kinds == {jnp.dtype(jnp.uint8), jnp.dtype(jnp.int8)}  # the layers 4-bit, the head int8
    head = [n for n in engine.twin.companions if engine.weights[n].dtype == jnp.int8]
    assert head == ["lm_head.weight"]


def test_a_matrix_is_quantized_once_then_read_from_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    weight = np.random.default_rng(0).standard_normal((63, 32)).astype(np.float32)
    first = int8_store.quantized_q4(weight)
    monkeypatch.setattr(int8_store, "quantize_groups", lambda _: pytest.fail("quantized again"))
    again = int8_store.quantized_q4(weight.copy())
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert int8_store.digest(weight, int8_store.Q4_FORMAT) != int8_store.digest(weight)


def test_pytorch_meshes_and_odd_rows_refuse_q4_in_one_line():
    with pytest.raises(PlaygroundError, match="backend=torch weights=q4 cannot run: q4 weights are the JAX engine's "
                                              "own 4-bit layout.*use nf4, or backend 'jax'"):
        RunSpec(backend="torch", weights="q4")
    with pytest.raises(PlaygroundError, match="weights=q4 runs on one device"):
        RunSpec(backend="jax", weights="q4", devices=2)
    odd = tiny_llama(hidden_size=48, intermediate_size=96)  # rows of 48 weights: no groups of 32
    with pytest.raises(PlaygroundError, match="weights=q4 cannot run on this model: a row of 48 weights"):
        jax_engine.device_bytes(odd, 1, "q4")

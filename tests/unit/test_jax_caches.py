"""JAX decoder with every cache type: the same tokens as the PyTorch caches, bounded bytes, quantization error.

Tiny random models: a Llama (2 layers, head size 16) with an imposed window or sinks, a Gemma3 with its own
window of 8 around one global layer, and a Llama with head size 64 for the quantized cache (so quanto's
groups of 64 are one token's head on the PyTorch side too). Each run crosses its window several times.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground.errors import PlaygroundError  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import (  # noqa: E402
    allowed_tiny_model,
    fast_lane_keeps,
    jax_run,
    jax_teacher_forced,
    mean_kl,
    run_script,
    tiny_gemma,
    tiny_llama,
    tiny_loaded,
    torch_greedy,
    torch_run,
    torch_teacher_forced,
)

PROMPT = torch.tensor([[5, 17, 42, 99, 3]])
LONG_PROMPT = torch.arange(1, 41).unsqueeze(0) * 7 % 250  # 40 tokens: longer than every window below
NEW = 60


@pytest.fixture(scope="module")
def llama():
    return tiny_loaded("tiny-llama-caches", tiny_llama())


@pytest.fixture(scope="module")
def gemma():
    return tiny_loaded("tiny-gemma-caches", tiny_gemma(sliding_window=8))


@pytest.fixture(scope="module")
def llama64():
    return tiny_loaded("tiny-llama-64", tiny_llama(hidden_size=128, num_attention_heads=2, num_key_value_heads=1))


def both(loaded, prompt: torch.Tensor, **knobs):
    """The JAX and the PyTorch run of the same greedy spec."""
    values = {"max_new_tokens": NEW, "min_new_tokens": NEW, **knobs}
    jax_out, _ = jax_run(loaded, prompt, RunSpec(backend="jax", **values))
    torch_out, _ = torch_run(loaded, prompt, RunSpec(backend="torch", **values))
    return jax_out, torch_out


def kv_row_bytes(config, layers: int | None = None) -> int:
    """Bytes of one position's keys and values, fp32, over `layers` layers (default: all)."""
    head_dim = config.hidden_size // config.num_attention_heads
    return (layers or config.num_hidden_layers) * 2 * config.num_key_value_heads * head_dim * 4


# -- same tokens as the PyTorch caches --------------------------------------------------------------------------

# the fast lane keeps each cache's first case, the short prompt (the window still wraps within NEW tokens)
@pytest.mark.parametrize("window", fast_lane_keeps([6, 16]))
@pytest.mark.parametrize("prompt", fast_lane_keeps([PROMPT, LONG_PROMPT]), ids=["short", "long"])
def test_imposed_sliding_window_matches_pytorch(llama, window, prompt):
    jax_out, torch_out = both(llama, prompt, cache="sliding", window=window)
    assert jax_out.sequences == torch_out.sequences
    assert jax_out.extra["cache_layers"] == {f"ring(slots={window}, window={window})": 2}


@pytest.mark.parametrize("prompt", fast_lane_keeps([PROMPT, LONG_PROMPT]), ids=["short", "long"])
def test_own_sliding_window_matches_pytorch_and_generate(gemma, prompt):
    jax_out, torch_out = both(gemma, prompt, cache="sliding", window=3)  # the model's own window (8) wins
    assert jax_out.sequences == torch_out.sequences
    assert jax_out.sequences[0] == torch_greedy(gemma.model, prompt, NEW, "dynamic")
    assert jax_out.extra["cache_layers"]["ring(slots=8, window=8)"] == 2  # the global layer grows


@pytest.mark.parametrize(("window", "sinks"), fast_lane_keeps([(8, 2), (16, 4), (12, 0)]))
@pytest.mark.parametrize("prompt", fast_lane_keeps([PROMPT, LONG_PROMPT]), ids=["short", "long"])
def test_sink_cache_matches_pytorch(llama, window, sinks, prompt):
    jax_out, torch_out = both(llama, prompt, cache="sink", window=window, sink_tokens=sinks)
    assert jax_out.sequences == torch_out.sequences


@pytest.mark.slow  # a guard on the parity above, with a third cache's programs: full suite only
def test_the_window_changes_the_tokens(llama):
    """The parity above only means something if the window and the sinks matter within NEW tokens."""
    full = jax_run(llama, PROMPT, RunSpec(backend="jax", max_new_tokens=NEW, min_new_tokens=NEW))[0].sequences
    for knobs in ({"cache": "sliding", "window": 6}, {"cache": "sink", "window": 8, "sink_tokens": 2},
                  {"cache": "sink", "window": 8, "sink_tokens": 0}):
        assert both(llama, PROMPT, **knobs)[0].sequences != full, knobs


# -- bytes: flat, stepwise, bounded ----------------------------------------------------------------------------

@pytest.mark.slow  # the fast lane: test_jax_decoder's static bytes (flat) and its growing cache (128 -> 192)
def test_static_is_flat_and_dynamic_steps_up_to_it(llama):
    new = 130  # 5 + 130 tokens: dynamic grows 128 -> 192, static holds 192 from the start
    static = jax_run(llama, PROMPT, RunSpec(backend="jax", cache="static", max_new_tokens=new, min_new_tokens=new))[0]
    dynamic = jax_run(llama, PROMPT, RunSpec(backend="jax", max_new_tokens=new, min_new_tokens=new))[0]
    row = kv_row_bytes(llama.model.config)
    assert static.kv_trace == [192 * row] * new
    assert dynamic.kv_trace[0] == 128 * row and dynamic.kv_trace[-1] == 192 * row
    assert sorted(dynamic.kv_trace) == dynamic.kv_trace and len(set(dynamic.kv_trace)) == 2
    assert dynamic.sequences == static.sequences


# the fast lane: the sink cache's ring (the sliding ring's bytes stay flat in test_jax_assisted's fast check)
@pytest.mark.parametrize("knobs", fast_lane_keeps([{"cache": "sliding", "window": 16},
                                                   {"cache": "sink", "window": 16, "sink_tokens": 4}], keep=1))
def test_bounded_caches_stay_bounded_over_three_windows(llama, knobs):
    new = 9 * 16  # nine windows
    out = jax_run(llama, PROMPT, RunSpec(backend="jax", max_new_tokens=new, min_new_tokens=new, **knobs))[0]
    bound = 16 * kv_row_bytes(llama.model.config)
    assert out.kv_trace == [bound] * new  # a ring of the window from the start, never growing
    assert out.extra["cache_lengths"] == [128, 192]  # while the cache length it was planned for grew


def test_own_window_layers_are_rings_and_the_global_layer_grows(gemma):
    new = 130
    out = jax_run(gemma, PROMPT, RunSpec(backend="jax", cache="sliding", max_new_tokens=new, min_new_tokens=new))[0]
    one_layer = kv_row_bytes(gemma.model.config, layers=1)
    rings = 2 * 8 * one_layer  # two sliding layers, 8 slots each
    assert out.kv_trace[0] == rings + 128 * one_layer and out.kv_cache_bytes == rings + 192 * one_layer


@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
def test_the_pages_kv_plot_shows_bounded_caches_flattening_on_both_backends(tmp_path, monkeypatch):
    """Through the runner and the Result into the page's KV plot data: on both backends the sliding and sink
    caches stop growing once their window is full, static is flat from the start, dynamic grows."""
    from playground import runner
    from playground.ui.plots import kv_frame, series_name

    caches = [{"cache": "sliding", "window": 16}, {"cache": "sink", "window": 16, "sink_tokens": 4},
              {"cache": "static"}, {"cache": "dynamic"}]
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as model:
        for backend in ("torch", "jax"):
            results = [runner.run_to_result("abc", RunSpec(model=model, backend=backend, chat=False, max_new_tokens=160,
                                                           min_new_tokens=160, **knobs)) for knobs in caches]
            frame = kv_frame(results, [c["cache"] for c in caches], range(len(caches))).dropna()
            sizes = {c["cache"]: frame[frame["column"] == series_name(i)]["KV cache (MiB)"].tolist()
                     for i, c in enumerate(caches)}
            assert all(len(trace) == 160 for trace in sizes.values()), backend
            for bounded in ("sliding", "sink"):  # the window (16) is full by step 14: three windows and more after
                assert len(set(sizes[bounded][16:])) == 1, (backend, bounded)
                assert sizes[bounded][-1] < sizes["static"][-1] / 4, (backend, bounded)
            assert len(set(sizes["static"])) == 1, backend
            assert sizes["dynamic"][-1] > sizes["dynamic"][0], backend
            if backend == "jax":  # rings of the window from the start; growth by doubling, in steps
                assert len(set(sizes["sliding"])) == len(set(sizes["sink"])) == 1
                assert len(set(sizes["dynamic"])) == 2


# -- quantized ---------------------------------------------------------------------------------------------------

@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_quantized_bytes_follow_the_formula(llama64, bits):
    spec = RunSpec(backend="jax", cache="quantized", cache_bits=bits, residual_length=16, max_new_tokens=160,
                   min_new_tokens=160)
    out = jax_run(llama64, PROMPT, spec)[0]
    store = 192  # 5 + 160 positions, rounded up; the quantized store grows 128 -> 192 with the cache
    per_position = 64 * bits // 8 + 2 * 4  # one head's codes, packed, + a scale and a zero point (one group)
    residual = 0 if bits == 8 else 16 * 64 * 4  # the newest 16 tokens in full precision
    layers_kv_heads_kv = 2 * 1 * 2
    assert out.kv_cache_bytes == layers_kv_heads_kv * (store * per_position + residual)
    assert out.kv_trace[0] < out.kv_cache_bytes  # it grows with the cache


@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_quantized_error_is_no_worse_than_pytorch(llama64, bits):
    """Mean KL of the next-token distribution against full precision, 64 teacher-forced steps."""
    prompt = torch.tensor([[5, 17, 42, 99, 3, 7, 9, 11]])  # 8 tokens: quanto's groups of 64 divide the prompt
    forced = torch_greedy(llama64.model, prompt, 64, "dynamic")
    spec = RunSpec(cache="quantized", cache_bits=bits, residual_length=16, max_new_tokens=64)
    full = torch_teacher_forced(llama64, RunSpec(max_new_tokens=64), prompt, forced)
    ours = mean_kl(full, jax_teacher_forced(llama64, spec.replace(backend="jax"), prompt, forced))
    theirs = mean_kl(full, torch_teacher_forced(llama64, spec, prompt, forced))
    assert 0 < ours <= theirs
    assert ours < {2: 1e-2, 4: 1e-4, 8: 1e-5}[bits]


@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
def test_quantized_layers_on_a_model_with_its_own_window(gemma):
    out = jax_run(gemma, PROMPT, RunSpec(backend="jax", cache="quantized", cache_bits=8, max_new_tokens=NEW,
                                         min_new_tokens=NEW))[0]
    assert out.extra["cache_layers"] == {"ring(slots=8, window=8)": 2,
                                         "quant(key_bits=8, value_bits=8, store=128, residual=0, slots=0)": 1}


# -- sampling, compile once, stop ------------------------------------------------------------------------------

CACHES = [{"cache": "static"}, {"cache": "dynamic"}, {"cache": "sliding", "window": 8},
          {"cache": "sink", "window": 8, "sink_tokens": 2}, {"cache": "quantized", "cache_bits": 4,
                                                              "residual_length": 8}]


@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
@pytest.mark.parametrize("knobs", CACHES, ids=lambda k: k["cache"])
def test_every_cache_samples_reproducibly_and_compiles_once(llama, knobs):
    spec = RunSpec(backend="jax", strategy="sampling", temperature=1.3, top_k=20, seed=3, max_new_tokens=40,
                   min_new_tokens=40, **knobs)
    first, chunks = jax_run(llama, PROMPT, spec)
    second, _ = jax_run(llama, PROMPT, spec)
    assert second.compile_s == 0.0 and first.sequences == second.sequences
    assert [t for c in chunks for t in c] == first.sequences[0]
    greedy = spec.replace(strategy="greedy")
    assert jax_run(llama, PROMPT, spec.replace(top_k=1))[0].sequences == jax_run(llama, PROMPT, greedy)[0].sequences


@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
@pytest.mark.parametrize("knobs", CACHES[2:], ids=lambda k: k["cache"])
def test_bounded_and_quantized_caches_stop_and_end_at_eos(knobs):
    loaded = tiny_loaded("tiny-llama-eos-caches", tiny_llama(seed=1))
    spec = RunSpec(backend="jax", max_new_tokens=40, min_new_tokens=40, **knobs)
    free = jax_run(loaded, PROMPT, spec)[0].sequences[0]
    polls = []
    stopped = jax_run(loaded, PROMPT, spec, lambda: polls.append(1) or len(polls) > 2)[0]
    assert stopped.stopped and stopped.sequences[0] == free[: 1 + 2 * 8]
    loaded.model.generation_config.eos_token_id = free[20]
    ended = jax_run(loaded, PROMPT, spec.replace(min_new_tokens=0))[0].sequences[0]
    assert ended == free[: free.index(free[20]) + 1]


# -- refusals ------------------------------------------------------------------------------------------------

def test_refusals_are_the_pytorch_paths(gemma):
    with pytest.raises(PlaygroundError) as on_torch:
        torch_run(gemma, PROMPT, RunSpec(cache="sink"))
    with pytest.raises(PlaygroundError) as on_jax:
        jax_run(gemma, PROMPT, RunSpec(backend="jax", cache="sink"))
    assert str(on_jax.value) == str(on_torch.value) and "sliding" in str(on_jax.value)
    for knobs, words in (({"cache": "sink", "window": 4, "sink_tokens": 4}, "must be smaller than window=4"),
                         ({"cache": "quantized", "cache_bits": 3}, "cache_bits 3 is not one of: 2, 4, 8")):
        for backend in ("torch", "jax"):
            with pytest.raises(PlaygroundError, match=words):
                RunSpec(backend=backend, **knobs)


def test_sink_on_a_sliding_model_is_refused_before_its_weights_load(tmp_path, monkeypatch):
    from playground import runner
    from playground.models import loaded as loaded_models
    from tests.helpers import byte_tokenizer

    path = tmp_path / "tiny-gemma"
    tiny_gemma().save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    loads = []
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", lambda *a, **k: loads.append(a))
    loaded_models.LOADED.clear()
    for backend in ("torch", "jax"):
        with pytest.raises(PlaygroundError, match="sliding") as refused:
            runner.run_to_result("hi", RunSpec(model=str(path), backend=backend, cache="sink", chat=False))
        assert str(refused.value).startswith("SinkCache does not support"), str(refused.value)  # not a load failure
    assert loads == [] and loaded_models.LOADED.keys() == []


# -- restarts (a subprocess: a fresh process finds the programs on disk; sharding: tests/unit/test_on_a_mesh.py)

@pytest.mark.subprocess
def test_every_caches_programs_load_from_disk_in_a_restarted_process(tmp_path):
    """The persistent compile cache for the bounded and quantized layouts (the ring layouts of the static and the
    growing cache are test_jax_decoder's restart test)."""
    env = {**os.environ, "PLAYGROUND_CACHE": str(tmp_path), "PLAYGROUND_COMPILE_CACHE": "1", "JAX_PLATFORMS": "cpu"}
    cold = run_script("restart_caches", env)
    entries = sorted(p.name for p in (tmp_path / "jax").iterdir())
    warm = run_script("restart_caches", env)
    assert sorted(p.name for p in (tmp_path / "jax").iterdir()) == entries  # every program came from disk
    for cache, run in warm.items():
        assert run["tokens"] == cold[cache]["tokens"], cache
        assert run["compile_s"] < cold[cache]["compile_s"], cache  # what is left is tracing, not XLA


@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
def test_cache_bench_suite_reports_every_cache_on_both_backends(monkeypatch, llama64):
    """(Head size 64: quanto's groups of 64 must divide what the PyTorch quantized cache holds.)"""
    import json

    from playground.models import loaded
    from playground.tools import bench_caches

    class FixedBandwidth:
        def __init__(self):
            self.samples = []

        def sample(self):
            self.samples.append(10.0)

        def close(self):
            pass

    monkeypatch.setattr(loaded.LOADED, "get", lambda name, weights="fp32", progress=None: (llama64, True))
    monkeypatch.setattr(bench_caches, "BandwidthProbe", FixedBandwidth)
    monkeypatch.setattr(bench_caches, "ROUNDS", 1)
    caches = ("static", "sliding")  # two of them: each compiles its own programs
    monkeypatch.setattr(bench_caches, "CACHES", caches)
    monkeypatch.setattr(bench_caches, "CACHE_KNOBS", {**bench_caches.CACHE_KNOBS, "sliding": {"window": 8}})
    result = bench_caches.run_cache_suite("tiny-llama", max_new_tokens=24, progress=lambda message: None)
    assert [c["name"] for c in result["configs"]] == [f"{b}-{c}" for c in caches for b in ("torch", "jax")]
    assert all(c["tokens_per_s"] > 0 and c["kv_cache_bytes"] > 0 for c in result["configs"])
    assert set(result["ratios"]["jax_vs_torch"]) == set(caches)
    assert result["ratios"]["jax_sliding_vs_jax_static"] > 0
    by_name = {c["name"]: c for c in result["configs"]}
    assert by_name["jax-sliding"]["kv_cache_bytes"] == 8 * kv_row_bytes(llama64.model.config)
    assert "jax sliding / jax static" in bench_caches.format_table(result)
    json.dumps(result)

"""JAX decoder: token parity with model.generate, sampling, streaming, compile caching, sharding.

These use tiny random-weight models (a Llama and a Gemma3 whose sliding window of 8 is crossed); the bundled
models' 128-token parity is in tests/integration/test_jax_decoder.py. Models are module-scoped: each new model
object gets its own engine and compiles its programs once.
"""

from __future__ import annotations

import gc
import json
import math
import os
import weakref

import pytest
import torch

pytest.importorskip("torchax")
jax = pytest.importorskip("jax")

from playground.errors import PlaygroundError  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import (  # noqa: E402
    bench_with,
    fast_lane_keeps,
    jax_run,
    run_script,
    tiny_gemma,
    tiny_llama,
    tiny_loaded,
    torch_greedy,
    torch_run,
)

PROMPT = torch.tensor([[5, 17, 42, 99, 3]])  # 5 tokens: padded to the 16-token prefill bucket
LONG_PROMPT = torch.arange(1, 21).unsqueeze(0) * 7 % 250  # 20 tokens: bucket 32
NEW = 24  # past the tiny Gemma's sliding window of 8


@pytest.fixture(scope="module")
def llama():
    return tiny_loaded("tiny-llama", tiny_llama())


@pytest.fixture(scope="module")
def gemma():
    return tiny_loaded("tiny-gemma", tiny_gemma(sliding_window=8))


def spec(**overrides) -> RunSpec:
    values = {"backend": "jax", "cache": "static", "max_new_tokens": NEW, "min_new_tokens": NEW}
    values.update(overrides)
    return RunSpec(**values)


# -- parity -------------------------------------------------------------------------------------------------

# the fast lane: Llama on the dynamic cache; Gemma3's greedy tokens are generate's in test_jax_caches' fast check of
# its own window (the same rings for its sliding layers and a growing global layer)
@pytest.mark.parametrize("cache", fast_lane_keeps(["dynamic", "static"]))
@pytest.mark.parametrize("which", fast_lane_keeps(["llama", "gemma"]))
def test_greedy_matches_generate(request, which, cache):
    loaded = request.getfixturevalue(which)
    out, _ = jax_run(loaded, PROMPT, spec(cache=cache))
    assert out.sequences[0] == torch_greedy(loaded.model, PROMPT, NEW, cache)


@pytest.mark.parametrize("which", fast_lane_keeps(["llama", "gemma"]))  # the fast lane: Llama; the full suite: both
def test_greedy_matches_generate_while_the_cache_grows(request, which):
    loaded = request.getfixturevalue(which)
    out, _ = jax_run(loaded, PROMPT, spec(cache="dynamic", max_new_tokens=130, min_new_tokens=130))
    assert out.extra["cache_lengths"] == [128, 192]
    assert out.kv_trace[0] < out.kv_trace[-1] == out.kv_cache_bytes  # the global layers doubled
    assert out.sequences[0] == torch_greedy(loaded.model, PROMPT, 130, "dynamic")


def test_a_growing_cache_compiles_a_decode_program_per_length_and_a_grow_between():
    """The design's count for a dynamic cache that doubles once: the prefill and first-token programs, a decode
    program for each cache length and one program that grows the cache between them. A fresh model, so its
    engine holds only this request's programs; the same request again compiles none."""
    loaded = tiny_loaded("tiny-llama-growing", tiny_llama(seed=5))
    grows = spec(cache="dynamic", max_new_tokens=130, min_new_tokens=130)
    out, _ = jax_run(loaded, PROMPT, grows)
    assert out.extra["cache_lengths"] == [128, 192]
    assert out.extra["compiled_programs"] == 2 + 2 + 1
    again, _ = jax_run(loaded, PROMPT, grows)
    assert again.extra["compiled_programs"] == 5 and again.compile_s < 0.5


def test_greedy_matches_generate_for_another_prompt_bucket(llama):
    out, _ = jax_run(llama, LONG_PROMPT, spec())
    assert out.extra["prefill_bucket"] == 32
    assert out.sequences[0] == torch_greedy(llama.model, LONG_PROMPT, NEW, "dynamic")


@pytest.mark.slow  # a guard on the parity above (a second Gemma's programs): full suite only
def test_sliding_window_changes_the_tokens(gemma):
    """The parity above only means something if the window matters within NEW tokens."""
    wide = tiny_loaded("tiny-gemma-wide", tiny_gemma(sliding_window=4096))
    narrow_tokens = jax_run(gemma, PROMPT, spec())[0].sequences[0]
    wide_tokens = jax_run(wide, PROMPT, spec())[0].sequences[0]
    assert wide_tokens == torch_greedy(wide.model, PROMPT, NEW, "dynamic")
    assert narrow_tokens != wide_tokens


@pytest.mark.slow  # the fast lane: test_token_probabilities' greedy run under a penalty gives generate's tokens on JAX
def test_repetition_penalty_matches_generate(llama):
    out, _ = jax_run(llama, PROMPT, spec(repetition_penalty=1.3))
    assert out.sequences[0] == torch_greedy(llama.model, PROMPT, NEW, "dynamic", repetition_penalty=1.3)


def test_stops_at_eos_and_keeps_it():
    loaded = tiny_loaded("tiny-llama-eos", tiny_llama(seed=1))
    free = torch_greedy(loaded.model, PROMPT, NEW, "dynamic")
    eos = free[5]
    first = free.index(eos)
    loaded.model.generation_config.eos_token_id = eos
    out, _ = jax_run(loaded, PROMPT, spec(min_new_tokens=0))
    assert out.sequences[0] == free[: first + 1]
    # min_new_tokens holds EOS back as generate does
    held, _ = jax_run(loaded, PROMPT, spec(min_new_tokens=first + 2, max_new_tokens=first + 2))
    assert held.sequences[0] == torch_greedy(loaded.model, PROMPT, first + 2, "dynamic")


# -- sampling -----------------------------------------------------------------------------------------------

# the full suite's: the seed reaches every strategy's key the same way (the request loop's prefill); the fast lane's
# checks are test_jax_beam_sample's (the same seed repeats, another differs) and test_step_mode's JAX replay
@pytest.mark.slow
def test_seeded_sampling_reproduces_and_seeds_differ(llama):
    knobs = {"strategy": "sampling", "temperature": 1.5, "top_k": 0}
    a = jax_run(llama, PROMPT, spec(seed=7, **knobs))[0].sequences[0]
    b = jax_run(llama, PROMPT, spec(seed=7, **knobs))[0].sequences[0]
    c = jax_run(llama, PROMPT, spec(seed=8, **knobs))[0].sequences[0]
    assert a == b
    assert a != c


@pytest.mark.slow  # the fast lane: test_token_probabilities' top-k 1 draws each token with probability 1 on JAX
def test_top_k_1_sampling_equals_greedy(llama):
    sampled = jax_run(llama, PROMPT, spec(strategy="sampling", top_k=1, seed=3, top_p=0.9))[0].sequences[0]
    assert sampled == jax_run(llama, PROMPT, spec())[0].sequences[0]


# -- streaming, stopping, accounting ------------------------------------------------------------------------

def test_streams_small_chunks_with_times(llama):
    out, chunks = jax_run(llama, PROMPT, spec())
    assert [t for c in chunks for t in c] == out.sequences[0]
    assert len(chunks[0]) == 1 and all(1 <= len(c) <= out.extra["steps_per_call"] for c in chunks)
    assert len(out.token_times) == len(out.sequences[0])
    assert out.start_time <= out.token_times[0] and out.token_times == sorted(out.token_times)
    assert out.forward_passes == len(out.sequences[0])  # prefill + one step per further token


def test_token_probabilities_match_the_pytorch_probe(llama):
    """The token view's figures (p, entropy, top alternatives) agree with what the PyTorch path records."""
    run_spec = spec(max_new_tokens=12, min_new_tokens=12)
    jax_out, _ = jax_run(llama, PROMPT, run_spec)
    torch_out, _ = torch_run(llama, PROMPT, RunSpec(max_new_tokens=12, min_new_tokens=12))
    assert jax_out.sequences == torch_out.sequences
    assert len(jax_out.token_info) == len(torch_out.token_info) == 12
    for ours, theirs in zip(jax_out.token_info, torch_out.token_info, strict=True):
        assert ours["p"] == pytest.approx(theirs["p"], abs=1e-4)
        assert ours["entropy"] == pytest.approx(theirs["entropy"], abs=1e-3)
        assert [t[0] for t in ours["top"]] == [t[0] for t in theirs["top"]]
        assert ours["top"][0][1] == pytest.approx(ours["p"])  # greedy takes the most probable token


@pytest.mark.slow  # the fast lane: test_token_probabilities checks JAX's sampled records against PyTorch's
def test_sampled_token_probabilities_are_those_of_the_filtered_distribution(llama):
    out, _ = jax_run(llama, PROMPT, spec(strategy="sampling", top_k=3, temperature=1.5, seed=4))
    for token, record in zip(out.sequences[0], out.token_info, strict=True):
        probs = {i: p for i, p, _ in record["top"]}
        assert probs[token] == pytest.approx(record["p"]) and record["p"] > 0  # drawn from the candidates
        assert sum(sorted(probs.values())[-3:]) == pytest.approx(1.0, abs=1e-5)  # top_k=3: all mass in 3
        assert record["entropy"] <= math.log(3) + 1e-5


def test_should_stop_ends_early(llama):
    jax_run(llama, PROMPT, spec(max_new_tokens=40, min_new_tokens=40))  # compiled first: a compile polls too
    polls = []

    def stop():
        polls.append(1)
        return len(polls) > 1  # after the first decode chunk

    out, chunks = jax_run(llama, PROMPT, spec(max_new_tokens=40, min_new_tokens=40), stop)
    assert out.stopped
    assert len(out.sequences[0]) == 1 + out.extra["steps_per_call"]


def test_second_identical_call_compiles_nothing(llama):
    first, _ = jax_run(llama, PROMPT, spec(max_new_tokens=9, min_new_tokens=9))
    second, _ = jax_run(llama, PROMPT, spec(max_new_tokens=9, min_new_tokens=9))
    assert second.compile_s == 0.0
    assert second.sequences == first.sequences
    # another prompt length in the same bucket, other knob values: still nothing to compile
    third, _ = jax_run(llama, PROMPT[:, :3], spec(max_new_tokens=9, min_new_tokens=0, repetition_penalty=1.0))
    assert third.compile_s == 0.0


def test_kv_cache_bytes_are_the_preallocated_arrays(llama):
    from playground.backends.jax.caches.plan import static_length

    out, _ = jax_run(llama, PROMPT, spec())
    config = llama.model.config
    length = static_length(PROMPT.shape[1], NEW)
    head_dim = config.hidden_size // config.num_attention_heads
    expected = config.num_hidden_layers * 2 * config.num_key_value_heads * length * head_dim * 4
    assert out.extra["cache_length"] == length
    assert out.kv_cache_bytes == expected
    assert out.kv_trace == [expected] * len(out.sequences[0])


def test_one_new_token(llama):
    out, chunks = jax_run(llama, PROMPT, spec(max_new_tokens=1, min_new_tokens=1))
    assert chunks == [out.sequences[0]] and out.sequences[0] == torch_greedy(llama.model, PROMPT, 1, "dynamic")


def test_buckets():
    from playground.backends.jax.caches.plan import growth_lengths, prefill_bucket, static_length

    assert [prefill_bucket(n) for n in (1, 16, 17, 100)] == [16, 16, 32, 128]
    # preallocated: prompt + new tokens, rounded up to 64 (the padded prompt may be longer: padding is dropped)
    assert static_length(5, 24) == 64 and static_length(40, 128) == 192 and static_length(129, 1) == 192
    # growing: doubling from the first power of two (at least 64) holding the prompt and a chunk, up to that
    assert growth_lengths(40, 128, 8) == [128, 192] and growth_lengths(5, 24, 8) == [64]
    assert growth_lengths(40, 300, 8) == [128, 256, 384]
    assert growth_lengths(60, 1000, 8) == [128, 256, 512, 1024, 1088] and growth_lengths(300, 8, 8) == [320]


def test_moving_the_weights_counts_in_neither_ttft_nor_the_run_time(monkeypatch):
    """A model's first JAX request moves its weights to the devices: that is loading (extra.weights_moved_s), not
    the time to a first token nor the generation's wall time. A slow move must show in neither."""
    import time

    from playground.backends.jax.engine import engine as jax_engine
    from playground.result import build_metrics

    move = jax_engine.traced.jax_weights

    def slow_move(*args, **kwargs):
        time.sleep(1.0)
        return move(*args, **kwargs)

    monkeypatch.setattr(jax_engine.traced, "jax_weights", slow_move)
    out, _ = jax_run(tiny_loaded("tiny-llama-slow-move", tiny_llama(seed=3)), PROMPT,
                     spec(max_new_tokens=3, min_new_tokens=3))
    metrics = build_metrics(out, time.perf_counter(), 0.0, None)
    assert out.extra["weights_moved_s"] >= 1.0
    assert metrics["ttft_s"] < 1.0 and metrics["total_s"] - metrics["compile_s"] < 1.0


def test_engine_is_reused_and_freed_with_its_model():
    from playground.backends.jax.engine import engine as jax_engine

    loaded = tiny_loaded("tiny-llama-evict", tiny_llama(seed=2))
    first, _ = jax_run(loaded, PROMPT, spec(max_new_tokens=3, min_new_tokens=3))
    second, _ = jax_run(loaded, PROMPT, spec(max_new_tokens=3, min_new_tokens=3))
    assert first.extra["weights_moved_s"] > 0 and second.extra["weights_moved_s"] == 0.0
    engine, reused = jax_engine.engine_for(loaded.model, 1)
    assert reused
    ref = weakref.ref(engine)
    del engine, loaded, first, second
    gc.collect()
    assert ref() is None


def test_refuses_what_it_cannot_run(llama):
    with pytest.raises(PlaygroundError, match="4 attention heads"):
        jax_run(llama, PROMPT, spec(devices=3))
    if len(jax.devices()) < 2:
        with pytest.raises(PlaygroundError, match="xla_force_host_platform_device_count"):
            jax_run(llama, PROMPT, spec(devices=2))


# -- restarts (a subprocess: a fresh process finds the programs on disk; sharding: tests/unit/test_on_a_mesh.py)

@pytest.mark.subprocess
def test_restarted_process_loads_compiled_programs_from_disk(tmp_path):
    env = {**os.environ, "PLAYGROUND_CACHE": str(tmp_path), "PLAYGROUND_COMPILE_CACHE": "1", "JAX_PLATFORMS": "cpu"}

    cold = run_script("restart_decoder", env)
    entries = sorted(p.name for p in (tmp_path / "jax").iterdir())
    assert entries, "nothing was written to $PLAYGROUND_CACHE/jax"
    warm = run_script("restart_decoder", env)
    assert sorted(p.name for p in (tmp_path / "jax").iterdir()) == entries  # every program came from disk
    assert warm["tokens"] == cold["tokens"]
    assert warm["compile_s"] < cold["compile_s"]  # what is left is tracing the model, not XLA


@pytest.mark.subprocess
def test_with_the_compile_cache_off_nothing_is_written_to_disk(tmp_path):
    env = {**os.environ, "PLAYGROUND_CACHE": str(tmp_path), "PLAYGROUND_COMPILE_CACHE": "0", "JAX_PLATFORMS": "cpu"}
    run_script("restart_decoder", env)
    assert not (tmp_path / "jax").exists()


@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
def test_bench_reports_the_documented_object(monkeypatch, llama):
    from playground.tools import bench

    bench_with(monkeypatch, llama)
    result = bench.run_bench("tiny-llama", max_new_tokens=12, progress=lambda message: None)
    assert set(result) == {"model", "new_tokens", "bandwidth_gbs", "weight_bytes", "roofline_tokens_per_s",
                           "configs", "ratios"}
    assert [c["name"] for c in result["configs"]][:5] == ["torch-dynamic", "torch-static", "jax", "jax-int8", "jax-q4"]
    assert all(set(c) == {"name", "tokens_per_s", "ttft_s", "compile_s"} for c in result["configs"][:3])
    assert 0 < result["configs"][3]["weight_bytes"] < llama.weight_bytes  # the bytes an int8 step reads
    # and what int8 costs, as every non-fp32 row says (on this tiny model's small matrices it can be 0.0)
    assert isinstance(result["configs"][3]["kl_vs_fp32"], float) and result["configs"][3]["kl_vs_fp32"] >= 0
    assert {"jax_vs_torch_dynamic", "jax_vs_roofline", "jax_int8_vs_jax", "jax_int8_vs_torch_dynamic"} <= set(
        result["ratios"])
    assert result["ratios"]["jax_int8_vs_jax"] > 0 and result["ratios"]["jax_q4_vs_jax"] > 0
    assert 0 < result["configs"][4]["weight_bytes"] < result["configs"][3]["weight_bytes"]  # 4-bit: fewer bytes
    names = [c["name"] for c in result["configs"]]
    assert names[5:7] == ["jax-sampling", "jax-all-samplers"]
    assert result["ratios"]["jax_all_samplers_vs_jax_sampling"] > 0
    beams = names.index("torch-beam4")
    assert names[beams:beams + 2] == ["torch-beam4", "jax-beam4"]
    assert {"jax_beam4_vs_torch_beam4", "jax_prompt_lookup_vs_jax"} <= set(result["ratios"])
    assert result["ratios"]["jax_beam4_vs_torch_beam4"] > 0
    # the guide's other methods on both backends, and JAX greedy over whole runs for contrastive search's target
    guide = ["beam_sample", "diverse_beam", "contrastive", "dola"]
    assert names[beams + 2:] == [f"{b}-{m}" for m in guide for b in ("torch", "jax")] + ["jax-greedy-whole-run"]
    assert all(result["ratios"][f"jax_{m}_vs_torch_{m}"] > 0 for m in guide)
    assert result["ratios"]["jax_contrastive_time_per_token_vs_jax_greedy"] > 0
    assert result["roofline_tokens_per_s"] == round(10.0e9 / llama.weight_bytes, 2)
    table = bench.format_table(result)
    assert "torch-dynamic" in table and "jax" in table and "roofline" in table and "jax-int8 / jax:" in table
    assert "the guide's methods, jax / torch" in table
    json.dumps(result)
    assert_prompt_lookup_rows_on_the_grounded_prompt(result)


def assert_prompt_lookup_rows_on_the_grounded_prompt(result: dict) -> None:
    """The bench times prompt lookup on its grounded prompt (one that repeats what the answer quotes), on both
    backends and over the bounded caches, each row against plain greedy's tokens."""
    from playground.tools import bench

    rows = {c["name"]: c for c in result["configs"]}
    assert {"jax-grounded", "torch-grounded", "torch-prompt-lookup", "torch-prompt-lookup-3",
            "jax-prompt-lookup"} <= set(rows)
    assert rows["jax-grounded"]["prompt_tokens"] >= 300
    for name in ("torch-prompt-lookup", "torch-prompt-lookup-3", "jax-prompt-lookup"):
        assert 0.0 <= rows[name]["acceptance_rate"] <= 1.0 and rows[name]["tokens_per_forward"] >= 1.0
    assert rows["jax-prompt-lookup"]["same_tokens_as_jax"] is True
    for name in ("jax-prompt-lookup-sliding", "jax-prompt-lookup-sink"):  # against plain greedy over their cache
        assert rows[name]["same_tokens_as_jax"] is True
    assert result["ratios"]["jax_prompt_lookup_sink_vs_static"] > 0
    assert result["ratios"]["jax_prompt_lookup_sliding_passes_vs_static"] > 0
    table = bench.format_table(result)
    assert "verify passes/s" in table
    assert result["ratios"]["jax_prompt_lookup_vs_jax"] > 0
    assert "jax-prompt-lookup / jax-grounded" in table
    assert result["ratios"]["torch_prompt_lookup_3_vs_torch"] > 0
    assert "torch prompt lookup (3 drafts) / torch-grounded" in table
    assert rows["torch-prompt-lookup-3"]["same_tokens_as_jax"] is True  # torch greedy = JAX greedy, lookup or not

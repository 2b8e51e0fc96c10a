"""The context command on tiny random models: quality through each cache against the full cache on both backends
(the static cache is the full cache, a window is exact until it fills, the backends agree), the speed rows, and
what is refused before anything runs.

A Llama with head size 64 (quanto's groups of 64 are one token's head on the PyTorch side), a 160-token text and a
window of 32: the first bucket of 32 positions is read before the window fills, the later ones after.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground.context import measure as context  # noqa: E402
from playground.context import request as context_request  # noqa: E402
from playground.context import speed as context_speed  # noqa: E402
from playground.context.quality import measure_quality  # noqa: E402
from playground.errors import PlaygroundError  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import allowed_tiny_model, fast_lane_keeps, tiny_llama, tiny_loaded  # noqa: E402

NAME = "tiny-llama-context"
TEXT = [i * 37 % 251 for i in range(1, 162)]  # 161 token ids: 160 positions scored, five buckets of 32
WINDOW = 32
QUALITY_KEYS = {"tokens", "ppl", "kl_vs_full", "top1_vs_full", "buckets"}


@pytest.fixture(scope="module")
def llama():
    return tiny_loaded(NAME, tiny_llama(hidden_size=128, num_attention_heads=2, num_key_value_heads=1))


def quality(llama, backend: str, cache: str, **knobs) -> dict:
    spec = RunSpec(model=NAME, backend=backend, cache=cache, **knobs)
    found = measure_quality(llama, spec, TEXT, lambda message: None, buckets=5, chunk=48)
    # two teacher-forced passes read side by side leave the process as they found it (a leaked inference mode
    # broke a later test's JAX tracing)
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    return found


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_the_static_cache_is_the_full_cache(llama, backend):
    found = quality(llama, backend, "static")
    assert set(found) == QUALITY_KEYS and found["tokens"] == 161
    assert found["kl_vs_full"] <= 1e-4 and found["top1_vs_full"] == 1.0
    assert [(b["start"], b["end"]) for b in found["buckets"]] == [(1, 33), (33, 65), (65, 97), (97, 129), (129, 161)]
    assert all(set(b) == {"start", "end", "ppl", "kl_vs_full", "top1_vs_full"} for b in found["buckets"])


@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize(("cache", "knobs"), fast_lane_keeps([("sliding", {"window": WINDOW}),  # the fast lane: sliding
                                                              ("sink", {"window": WINDOW, "sink_tokens": 4})]))
def test_a_window_loses_nothing_before_it_fills_and_something_after(llama, backend, cache, knobs):
    first, *later = quality(llama, backend, cache, **knobs)["buckets"]
    assert first["kl_vs_full"] <= 1e-6 and first["top1_vs_full"] == 1.0  # positions 1-32: nothing evicted yet
    assert all(bucket["kl_vs_full"] > 1e-3 for bucket in later)


@pytest.mark.parametrize(("cache", "knobs"), [
    ("sliding", {"window": WINDOW}), ("sink", {"window": WINDOW, "sink_tokens": 4}),
    # slow: quanto builds its CPU kernels for the PyTorch side (about a minute and a half on 2 cores)
    pytest.param("quantized", {"cache_bits": 4, "residual_length": 16}, marks=pytest.mark.slow)])
def test_both_backends_agree_on_what_a_cache_loses(llama, cache, knobs):
    on_torch, on_jax = quality(llama, "torch", cache, **knobs), quality(llama, "jax", cache, **knobs)
    assert on_jax["ppl"] == pytest.approx(on_torch["ppl"], rel=0.01)
    assert on_jax["kl_vs_full"] == pytest.approx(on_torch["kl_vs_full"], rel=0.5)
    assert on_torch["kl_vs_full"] > 1e-6  # the cache does lose something: the comparison is not empty


@pytest.mark.slow  # the fast lane's quality check is the one above; each width's error: test_jax_caches.py
def test_the_quantized_cache_loses_more_with_fewer_bits(llama):
    four, two = (quality(llama, "jax", "quantized", cache_bits=bits, residual_length=16) for bits in (4, 2))
    assert two["kl_vs_full"] > 4 * four["kl_vs_full"] > 0


@pytest.mark.slow  # four timed runs a backend (a warm-up and a timed run per length)
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_speed_rows_keep_a_bounded_cache_flat(llama, backend, monkeypatch):
    monkeypatch.setattr(context_speed, "sample_bandwidth", lambda: [10.0])  # no 1 GiB probe in the fast lane
    text = [i * 11 % 251 for i in range(1, 201)]
    rows = {}
    for cache in ("dynamic", "sink"):
        spec = RunSpec(model=NAME, backend=backend, cache=cache, window=WINDOW)
        rows[cache], basis = context_speed.measure_speed(llama, spec, text, [64, 128], lambda message: None)
    assert basis == {"bandwidth_gbs": 10.0, "weight_bytes": basis["weight_bytes"]} and basis["weight_bytes"] > 0
    for row in rows["dynamic"] + rows["sink"]:
        assert set(row) == {"context_tokens", "prefill_s", "prefill_tokens_per_s", "decode_tokens_per_s", "kv_bytes",
                            "peak_rss_bytes", "roofline_tokens_per_s"}
        assert row["decode_tokens_per_s"] > 0 and row["peak_rss_bytes"] > 0
        assert row["roofline_tokens_per_s"] == pytest.approx(10e9 / (basis["weight_bytes"] + row["kv_bytes"]), rel=1e-3)
    short, long = rows["dynamic"]
    assert (short["context_tokens"], long["context_tokens"]) == (64, 128) and long["kv_bytes"] > short["kv_bytes"]
    assert rows["sink"][0]["kv_bytes"] == rows["sink"][1]["kv_bytes"] < long["kv_bytes"]


def request(measures="speed,quality", lengths="64", tokens=100, buckets=4) -> context_request.ContextRequest:
    return context_request.parse_request(measures, lengths, tokens, buckets)


@pytest.mark.parametrize(("given", "fragment"), [
    (dict(lengths="4000,4032,4096"), "--lengths 4096: a length and the 64 tokens decoded after it must fit "
                                     "tiny's context of 4096 tokens; the longest length allowed is 4032"),
    (dict(tokens=5000), "--tokens 5000 exceeds tiny's context of 4096 tokens"),
])
def test_lengths_beyond_the_models_context_are_refused_naming_it(given, fragment):
    with pytest.raises(PlaygroundError) as refused:
        context_request.check_context(request(**given), "tiny", 4096)
    assert str(refused.value) == fragment


@pytest.mark.parametrize(("text", "fragment"), [
    ("speed,memory", "--measure 'speed,memory': give speed and/or quality, comma-separated"),
    ("", "--measure '': give speed and/or quality"),
])
def test_unknown_measures_are_refused(text, fragment):
    with pytest.raises(PlaygroundError, match=fragment):
        context_request.parse_measures(text)


@pytest.mark.parametrize("text", ["512,x", "0,512", ""])
def test_bad_lengths_are_refused(text):
    with pytest.raises(PlaygroundError, match="give context lengths in tokens, whole numbers above 0"):
        context_request.parse_lengths(text)


@pytest.fixture()
def saved(tmp_path, monkeypatch):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        yield path


def test_a_window_larger_than_the_text_measured_is_refused(saved, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("a long text " * 40)  # 480 byte tokens
    spec = RunSpec(model=saved, cache="sliding", window=300)
    with pytest.raises(PlaygroundError, match="window=300 is not smaller than the 200 tokens of text measured"):
        context.run_context(spec, request(measures="quality", tokens=200), str(text), lambda message: None)
    with pytest.raises(PlaygroundError, match=r"--text-file .*text.txt' is 480 tokens for .*; the request reads 600 "):
        context.run_context(spec, request(measures="quality", tokens=600), str(text), lambda message: None)


def test_a_bad_text_file_is_refused_before_the_model_loads(saved, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(PlaygroundError, match="--text-file .*empty.txt' is empty"):
        context.run_context(RunSpec(model=saved), request(), str(empty), lambda message: None)


def test_a_sliding_window_on_pytorch_reads_the_same_in_chunks_as_in_steps(llama, monkeypatch):
    """The sliding cache goes through in chunks on PyTorch: exact only while its window reaches into the mask of
    a multi-token forward, which this holds against single steps."""
    from playground.backends.torch import teacher_forced

    spec = RunSpec(model=NAME, cache="sliding", window=WINDOW)
    assert not teacher_forced.steps_one_at_a_time(spec)
    chunked = torch.cat(list(teacher_forced.logprobs_through_cache(llama, spec, torch.tensor([TEXT]), 48)))
    monkeypatch.setattr(teacher_forced, "EXACT_IN_CHUNKS", frozenset())
    stepped = torch.cat(list(teacher_forced.logprobs_through_cache(llama, spec, torch.tensor([TEXT]), 48)))
    assert chunked.shape == stepped.shape == (160, 257)
    assert torch.allclose(chunked, stepped, atol=1e-4)


def test_the_full_cache_is_read_once_per_backend_for_several_caches(llama, monkeypatch):
    """A tab run over N caches teacher-forces the reference once per backend, and the figures stay the same."""
    from playground.runner import backend_for

    alone = {cache: quality(llama, "torch", cache, **({"window": WINDOW} if cache == "sliding" else {}))
             for cache in ("static", "sliding", "dynamic")}
    backend = type(backend_for("torch"))  # a fresh backend per call: count on the class
    through = backend.logprobs_through_cache
    passes: list[str] = []

    def counted(self, loaded, spec, ids, chunk, preparing=None):
        passes.append(spec.cache)
        return through(self, loaded, spec, ids, chunk, preparing)

    monkeypatch.setattr(backend, "logprobs_through_cache", counted)
    references: dict = {}
    shared = {cache: measure_quality(llama, RunSpec(model=NAME, backend="torch", cache=cache,
                                                    **({"window": WINDOW} if cache == "sliding" else {})),
                                     TEXT, lambda message: None, buckets=5, chunk=48, references=references)
              for cache in ("static", "sliding", "dynamic")}
    assert sorted(passes) == ["dynamic", "sliding", "static"]  # the reference once, and each other cache once
    assert shared == alone

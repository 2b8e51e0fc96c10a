"""Contrastive search on the JAX path (playground/backends/jax/strategies/contrastive.py): transformers 4.52.4's tokens
(tests/references/guide_methods.json) on every tiny reference model, the PyTorch path's tokens and per-token
candidate records, every cache, a growing cache, a constraint, a stop, and nothing compiled twice."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground.spec import RunSpec  # noqa: E402
from tests.helpers import jax_run, tiny_llama, tiny_loaded, torch_run  # noqa: E402
from tests.unit.test_guide_references import (  # noqa: E402
    REFERENCES,
    record_by_id,
    records,
    shared_model,
    weights_module,
)

TINY = records("contrastive_search", "tiny")
PLAIN = "tiny-2l/p1/contrastive_search/alpha0.6-k4"  # 32 tokens, no EOS, some not the most probable candidate


def _loaded(record: dict):
    """The record's tiny model with its EOS, as the references were recorded."""
    model = shared_model(record["model"])
    model.generation_config.eos_token_id = record["generate_kwargs"]["eos_token_id"]
    model.generation_config.pad_token_id = record["generate_kwargs"]["pad_token_id"]
    return tiny_loaded(record["model"], model)


def _spec(record: dict, **changed) -> RunSpec:
    kwargs = record["generate_kwargs"]
    values = {"strategy": "contrastive", "backend": "jax", "penalty_alpha": kwargs["penalty_alpha"],
              "top_k": kwargs["top_k"], "max_new_tokens": kwargs["max_new_tokens"], **changed}
    return RunSpec(**values)


def _prompt(record: dict) -> torch.Tensor:
    return torch.tensor([record["prompt_ids"]])


@pytest.mark.parametrize("record", [pytest.param(r, id=r["id"], marks=() if r["id"] == PLAIN else pytest.mark.slow)
                                    for r in TINY])  # the fast lane: PLAIN, which the tests below share
def test_tiny_models_give_transformers_4_52_tokens_on_jax(record):
    out, chunks = jax_run(_loaded(record), _prompt(record), _spec(record))
    (expected,) = record["output"]["sequences"]
    assert out.sequences[0] == expected  # stopped where 4.52 did too: on EOS, or at max_new_tokens
    assert [t for chunk in chunks for t in chunk] == expected and chunks[0] == expected[:1]  # the first alone
    assert all(len(chunk) <= out.extra["steps_per_call"] for chunk in chunks)
    assert len(out.token_times) == len(expected) and out.forward_passes == 1 + len(expected)


def test_jax_weighs_each_token_as_the_pytorch_path_does():
    record = record_by_id(PLAIN)
    loaded, spec = _loaded(record), _spec(record)
    ours, _ = jax_run(loaded, _prompt(record), spec)
    theirs, _ = torch_run(loaded, _prompt(record), spec.replace(backend="torch"))
    assert ours.sequences == theirs.sequences and ours.token_info and theirs.token_info
    assert any(info["candidates"][0][0] != token for info, token in zip(ours.token_info, ours.sequences[0],
                                                                         strict=True))  # the penalty decided
    for mine, there, token in zip(ours.token_info, theirs.token_info, ours.sequences[0], strict=True):
        assert [c[0] for c in mine["candidates"]] == [c[0] for c in there["candidates"]]
        for index in (1, 2, 3):  # probability, penalty, score
            assert [c[index] for c in mine["candidates"]] == pytest.approx([c[index] for c in there["candidates"]],
                                                                           abs=1e-4)
        assert max(mine["candidates"], key=lambda c: c[3])[0] == token
        assert mine["p"] == pytest.approx(there["p"], abs=1e-4)
        assert [t for t, _, _ in mine["top"]] == [t for t, _, _ in there["top"]]


@pytest.mark.slow  # the full suite's: the fast lane keeps the reference and PyTorch parity
@pytest.mark.parametrize("cache", ["static", "quantized", "sliding", "sink"])
def test_every_cache_runs_and_a_full_one_gives_the_dynamic_caches_tokens(cache):
    record = record_by_id(PLAIN)
    loaded = _loaded(record)
    dynamic, _ = jax_run(loaded, _prompt(record), _spec(record))
    # 11 prompt tokens + 32 new fit a window of 64: nothing is evicted; a window of 8 wraps
    full = {"quantized": {"cache_bits": 8}, "sliding": {"window": 64}, "sink": {"window": 64, "sink_tokens": 4}}
    out, _ = jax_run(loaded, _prompt(record), _spec(record, cache=cache, **full.get(cache, {})))
    assert len(out.sequences[0]) == 32 and all(len(info["candidates"]) == 4 for info in out.token_info or [])
    if cache != "quantized":  # quantized keys and values score differently
        assert out.sequences == dynamic.sequences
    if cache in ("sliding", "sink"):
        bounded = {"window": 8} if cache == "sliding" else {"window": 8, "sink_tokens": 2}
        narrow, _ = jax_run(loaded, _prompt(record), _spec(record, cache=cache, **bounded))
        assert len(narrow.sequences[0]) == 32 and narrow.kv_cache_bytes < out.kv_cache_bytes


@pytest.mark.slow  # the full suite's: the fast lane keeps the reference and PyTorch parity
def test_a_growing_cache_gives_the_static_caches_tokens():
    loaded = tiny_loaded("tiny-contrastive-growing", tiny_llama(seed=4))
    prompt = torch.tensor([[5, 17, 42, 99, 3, 5, 17, 42]])
    spec = RunSpec(strategy="contrastive", backend="jax", top_k=3, penalty_alpha=0.5, max_new_tokens=130,
                   min_new_tokens=130)
    grown, _ = jax_run(loaded, prompt, spec)
    static, _ = jax_run(loaded, prompt, spec.replace(cache="static"))
    assert grown.extra["cache_lengths"] == [128, 192] and grown.kv_trace[0] < grown.kv_trace[-1]
    assert grown.sequences == static.sequences and len(grown.sequences[0]) == 130


def test_a_repeated_request_or_another_alpha_compiles_nothing():
    record = record_by_id(PLAIN)
    loaded = tiny_loaded("tiny-contrastive-compiles", tiny_llama(seed=7))  # its own engine: only these programs
    first, _ = jax_run(loaded, _prompt(record), _spec(record))
    assert first.extra["compiled_programs"] == 3  # prefill, start, and the decode call (the first step's too)
    again, _ = jax_run(loaded, _prompt(record), _spec(record))
    assert again.compile_s == 0.0 and again.sequences == first.sequences
    other, _ = jax_run(loaded, _prompt(record), _spec(record, penalty_alpha=0.2, max_new_tokens=20))
    assert other.compile_s == 0.0 and other.extra["compiled_programs"] == 3
    one, _ = jax_run(loaded, _prompt(record), _spec(record, max_new_tokens=1))
    assert one.compile_s == 0.0 and one.sequences[0] == first.sequences[0][:1]


def test_should_stop_ends_after_the_call_it_sees():
    record = record_by_id(PLAIN)
    loaded = _loaded(record)
    jax_run(loaded, _prompt(record), _spec(record))  # compiled first: a compile polls too
    polls: list[int] = []

    def stop() -> bool:
        polls.append(1)
        return len(polls) > 1  # after the first decode chunk

    out, _ = jax_run(loaded, _prompt(record), _spec(record), stop)
    assert out.stopped and len(out.sequences[0]) == 1 + out.extra["steps_per_call"]


@pytest.mark.slow  # the full suite's: the fast lane keeps the reference and PyTorch parity
def test_a_constrained_search_is_the_pytorch_paths():
    loaded = tiny_loaded("tiny-contrastive-constrained", tiny_llama(seed=5))
    prompt = torch.tensor([[72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]])
    spec = RunSpec(strategy="contrastive", top_k=4, penalty_alpha=0.6, max_new_tokens=24, constraint="regex",
                   constraint_text="[0-9]{1,3}(-[a-c]{1,2})?")
    theirs, _ = torch_run(loaded, prompt, spec)
    ours, _ = jax_run(loaded, prompt, spec.replace(backend="jax"))
    assert ours.sequences == theirs.sequences and ours.sequences[0][-1] == 256
    assert ours.extra["steps_per_call"] == 1 and ours.constraint_replay == [(True, None)]


def test_the_memory_budget_counts_the_top_k_candidates_rows():
    from playground.backends.jax.backend import JaxBackend

    loaded, backend = tiny_loaded("tiny"), JaxBackend()
    # long enough that the cache outweighs the prefill's working memory, which the candidates do not multiply
    greedy = backend.memory_needed(loaded, RunSpec(backend="jax", max_new_tokens=256), 16, None).run
    wide = backend.memory_needed(loaded, RunSpec(strategy="contrastive", backend="jax", top_k=8, max_new_tokens=256),
                                 16, None).run
    assert wide.bytes == 8 * greedy.bytes and "x 8 rows" in wide.what and "lower top_k" in wide.hint


BUNDLED = [r for r in records("contrastive_search", "bundled") if "/p0/" in r["id"]]  # both settings, one prompt
# the full suite runs the first setting; the second is extended (tiny models run both)
BUNDLED_PARAMS = [pytest.param(r, id=r["id"], marks=[pytest.mark.extended] if i else []) for i, r in enumerate(BUNDLED)]


@pytest.mark.slow
@pytest.mark.parametrize("record", BUNDLED_PARAMS)
def test_smollm2_gives_transformers_4_52_tokens_on_jax(record):
    from tests.helpers import bundled

    loaded = bundled("smollm2-135m")
    assert weights_module().weights_digest(loaded.model) == REFERENCES["models"][record["model"]]["weights_digest"]
    out, _ = jax_run(loaded, _prompt(record), _spec(record))
    assert out.sequences == record["output"]["sequences"]

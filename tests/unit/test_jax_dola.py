"""DoLa on the JAX path (playground/backends/jax/strategies/dola.py) gives transformers 4.52.4's tokens and premature
layers (tests/references/guide_methods.json), the PyTorch path's tokens and per-token records, on every cache."""

from __future__ import annotations

import pytest
import torch

from playground.spec import RunSpec
from tests.helpers import jax_run, tiny_llama, tiny_loaded, torch_run
from tests.unit.test_guide_references import records, shared_model

TINY = records("dola", "tiny")
FAST = {"tiny-8l/p1/dola/high-rep1.2"}  # layers 4 and 6 both chosen; the other records: the full suite


def _spec(record: dict, **overrides) -> RunSpec:
    kwargs = record["generate_kwargs"]
    return RunSpec.from_dict({"strategy": "dola", "dola_layers": kwargs["dola_layers"], "backend": "jax",
                              "repetition_penalty": kwargs["repetition_penalty"],
                              "max_new_tokens": kwargs["max_new_tokens"], **overrides})


@pytest.mark.parametrize("record", [pytest.param(r, id=r["id"], marks=() if r["id"] in FAST else pytest.mark.slow)
                                    for r in TINY])
def test_tiny_models_give_transformers_4_52_tokens_and_layers(record):
    loaded = tiny_loaded(record["model"], shared_model(record["model"]))
    out, streamed = jax_run(loaded, torch.tensor([record["prompt_ids"]]), _spec(record))
    (expected,) = record["output"]["sequences"]
    assert out.sequences[0] == expected and [t for chunk in streamed for t in chunk] == expected
    assert [info["dola"]["layer"] for info in out.token_info or []] == record["diagnostics"]["premature_layers"]


def test_the_records_are_the_pytorch_paths():
    record = next(r for r in TINY if r["id"] == "tiny-8l/p1/dola/high-rep1.2")  # layers 4 and 6 both chosen
    loaded = tiny_loaded(record["model"], shared_model(record["model"]))
    ids = torch.tensor([record["prompt_ids"]])
    on_jax, _ = jax_run(loaded, ids, _spec(record))
    on_torch, _ = torch_run(loaded, ids, _spec(record, backend="torch"))
    assert on_jax.sequences == on_torch.sequences
    again, _ = jax_run(loaded, ids, _spec(record, repetition_penalty=1.1))
    assert again.compile_s == 0.0  # a repeated request compiles nothing, another penalty included
    for mine, theirs in zip(on_jax.token_info or [], on_torch.token_info or [], strict=True):
        assert mine["dola"]["layer"] == theirs["dola"]["layer"] and mine["dola"]["layers"] == theirs["dola"]["layers"]
        assert mine["dola"]["final_top"] == theirs["dola"]["final_top"]
        assert mine["dola"]["js"] == pytest.approx(theirs["dola"]["js"], rel=1e-3, abs=1e-7)
        assert mine["p"] == pytest.approx(theirs["p"], abs=1e-4)


def test_the_contrast_is_its_own_stage_ahead_of_the_chain_on_both_backends():
    """The model's probabilities are the final layer's (its top is the token "would have taken" names), the
    contrast removes and moves what it does as the first stage, and the repetition penalty removes nothing."""
    record = next(r for r in TINY if r["id"] == "tiny-8l/p1/dola/high-rep1.2")  # the contrast changes every token
    loaded = tiny_loaded(record["model"], shared_model(record["model"]))
    ids = torch.tensor([record["prompt_ids"]])
    on_jax, _ = jax_run(loaded, ids, _spec(record, max_new_tokens=6))
    on_torch, _ = torch_run(loaded, ids, _spec(record, backend="torch", max_new_tokens=6))
    for mine, theirs in zip(on_jax.token_info or [], on_torch.token_info or [], strict=True):
        for info in (mine, theirs):
            (contrast, removed, moved), (penalty, penalty_removed, _) = info["stages"][:2]
            assert (contrast, penalty) == ("dola", "repetition_penalty") and penalty_removed == 0
            assert removed > 0 and 0.0 < moved <= 1.0  # the relative-top filter cuts most of the vocabulary
            assert info["top"][0][0] == info["dola"]["final_top"]  # the chart's top is the final layer's
            cut = dict(zip((i for i, _, _ in info["top"]), info["top_cut"], strict=True))
            assert set(cut.values()) <= {None, "dola"}  # only the contrast takes candidates out
            assert all(cut[i] == "dola" for i, p, _ in info["top"] if p == 0.0)
        assert mine["stages"][0][1] == theirs["stages"][0][1]
        assert mine["stages"][0][2] == pytest.approx(theirs["stages"][0][2], abs=1e-4)
        assert mine["p_model"] == pytest.approx(theirs["p_model"], abs=1e-4)
        assert [i for i, _, _ in mine["top"]] == [i for i, _, _ in theirs["top"]]


@pytest.mark.slow  # each cache's DoLa programs: the fast lane's DoLa check is the reference above
@pytest.mark.parametrize("cache", ["dynamic", "static", "quantized", "sliding", "sink"])
def test_dola_gives_the_pytorch_paths_tokens_on_every_cache_past_three_windows(cache):
    """35 positions through a window of 8: the sliding and sink caches evict for 3 windows and more."""
    loaded = tiny_loaded("tiny", tiny_llama(seed=2))
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    knobs = {"quantized": {"cache_bits": 8}, "sliding": {"window": 8}, "sink": {"window": 8, "sink_tokens": 2}}
    spec = RunSpec(strategy="dola", dola_layers="0", repetition_penalty=1.2, max_new_tokens=30, min_new_tokens=30,
                   cache=cache, **knobs.get(cache, {}))
    on_torch, _ = torch_run(loaded, ids, spec)
    on_jax, _ = jax_run(loaded, ids, spec.replace(backend="jax"))
    assert on_jax.sequences == on_torch.sequences and len(on_jax.sequences[0]) == 30
    assert on_jax.extra["dola_layers"] == [0]


@pytest.mark.slow
def test_smollm2_gives_transformers_4_52_tokens_and_layers():
    from tests.helpers import bundled

    record = records("dola", "bundled")[0]
    out, _ = jax_run(bundled("smollm2-135m"), torch.tensor([record["prompt_ids"]]), _spec(record))
    (expected,) = record["output"]["sequences"]
    assert out.sequences[0] == expected
    assert [info["dola"]["layer"] for info in out.token_info or []] == record["diagnostics"]["premature_layers"]

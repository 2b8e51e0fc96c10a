"""The guide's methods as strategies of the product: a RunSpec asks for one, the PyTorch path runs our loop
through generate(custom_generate=...), and the tokens are transformers 4.52.4's (tests/references), with the
token view's records and the streamed times of any other strategy. Where a method has no JAX plug-in or needs a
cache, RunSpec refuses the rest with the method's reason."""

from __future__ import annotations

import pytest
import torch

from playground import compatibility, registry
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from tests.helpers import tiny_loaded, torch_run
from tests.unit.test_guide_references import records, shared_model

CONTRASTIVE = records("contrastive_search", "tiny")


def _as_spec(record: dict) -> RunSpec:
    kwargs = record["generate_kwargs"]
    return RunSpec(strategy="contrastive", penalty_alpha=kwargs["penalty_alpha"], top_k=kwargs["top_k"],
                   max_new_tokens=kwargs["max_new_tokens"])


@pytest.mark.parametrize("record", CONTRASTIVE[:4], ids=[r["id"] for r in CONTRASTIVE[:4]])
def test_a_contrastive_column_gives_transformers_4_52_tokens(record):
    model = shared_model(record["model"])
    model.generation_config.eos_token_id = record["generate_kwargs"]["eos_token_id"]
    model.generation_config.pad_token_id = record["generate_kwargs"]["pad_token_id"]
    loaded = tiny_loaded(record["model"], model)
    ids = torch.tensor([record["prompt_ids"]])
    out, streamed = torch_run(loaded, ids, _as_spec(record))
    (expected,) = record["output"]["sequences"]
    assert out.sequences[0] == expected[:len(out.sequences[0])]
    assert streamed == out.sequences[0]  # streamed token by token through the loop's emit
    assert len(out.token_times) == len(streamed)  # each one timed as it arrived
    assert out.token_info is not None and len(out.token_info) == len(streamed)  # the token view's records


def test_contrastive_search_is_refused_where_it_cannot_run_with_the_reason():
    with pytest.raises(PlaygroundError, match="runs on the PyTorch path only so far.*use backend 'torch'"):
        RunSpec(strategy="contrastive", backend="jax", top_k=4)
    with pytest.raises(PlaygroundError, match="repeated top_k times.*use cache 'dynamic'"):
        RunSpec(strategy="contrastive", cache="sink", top_k=4)
    with pytest.raises(PlaygroundError, match="top_k=1 must be 2 to 64"):
        RunSpec(strategy="contrastive", top_k=1)
    assert "loops of their own" in compatibility.compile_refusal("default", "torch", "contrastive", "static", "fp32")


def test_the_compatibility_table_and_the_page_follow_the_entry():
    rows = {(r["backend"], r["strategy"]): r for r in compatibility.table()}
    assert rows[("torch", "contrastive")]["dynamic"] == "yes"
    assert all(rows[("torch", "contrastive")][c] == "no" for c in ("static", "quantized", "sliding", "sink"))
    assert all(v == "no" for k, v in rows[("jax", "contrastive")].items() if k not in ("backend", "strategy"))
    assert "contrastive" in registry.strategy_names() and "contrastive" not in registry.page_strategy_names()


def test_the_cli_runs_contrastive_search(tmp_path, monkeypatch, capsys):
    import json

    from playground.__main__ import main
    from tests.helpers import allowed_tiny_model

    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        main(["run", "--model", path, "--prompt", "hello", "--strategy", "contrastive", "--penalty-alpha", "0.6",
              "--top-k", "4", "--max-new-tokens", "6", "--min-new-tokens", "6", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert result["spec"]["strategy"] == "contrastive" and result["spec"]["penalty_alpha"] == 0.6
    assert result["new_tokens"] == 6 and len(result["tokens"]) == 6


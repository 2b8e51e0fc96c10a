"""Each token's raw and processed log-probabilities: kept unrounded in the Result on both backends, and exported
as JSON (with the alternatives) and CSV, a branch's forced tokens first and without figures."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from playground import runner
from playground.spec import RunSpec
from playground.ui.token_export import logprobs_csv, logprobs_json
from tests.helpers import fast_lane_keeps, module_tiny_model

pytest.importorskip("torchax")


@pytest.fixture(scope="module")
def local_model(tmp_path_factory):
    with module_tiny_model(tmp_path_factory, seed=4) as path:
        yield path


# the fast lane: PyTorch's; JAX's records (each p before and after the chain, what cut each alternative) match
# PyTorch's in test_token_probabilities
@pytest.mark.parametrize("backend", fast_lane_keeps(["torch", "jax"]))
def test_a_run_keeps_each_token_s_raw_and_processed_log_probability(local_model, backend):
    spec = RunSpec(model=local_model, backend=backend, cache="static" if backend == "jax" else "dynamic",
                   strategy="sampling", top_k=3, temperature=0.7, max_new_tokens=6, seed=1)
    result = runner.run_to_result("the lighthouse", spec)
    for token in result["tokens"]:
        # the same probabilities, less the rounding of p to five places
        assert math.exp(token["logprob"]) == pytest.approx(token["p"], abs=5.1e-6)
        assert math.exp(token["logprob_model"]) == pytest.approx(token["p_model"], abs=5.1e-6)
        assert token["logprob"] > token["logprob_model"]  # top-3 at 0.7 concentrates the mass on the drawn few
        removed = [a for a in token["alternatives"] if a["removed_by"] == "top_k"]
        assert removed and all(a["logprob"] is None and a["logprob_model"] < 0 for a in removed)
    exported = json.loads(logprobs_json([result], ["1: sampling"]))["columns"][0]
    assert [t["logprob_processed"] for t in exported["tokens"]] == [t["logprob"] for t in result["tokens"]]
    assert exported["tokens"][0]["top"][0]["logprob_raw"] == result["tokens"][0]["alternatives"][0]["logprob_model"]


def _result(prefix: dict | None = None) -> dict:
    tokens = [{"id": 5, "text": " a", "p": 0.5, "entropy": 0.7, "p_model": 0.25, "entropy_model": 2.0,
               "logprob": -0.693147, "logprob_model": -1.386294, "top": None, "draft": None,
               "alternatives": [{"id": 5, "text": " a", "p": 0.5, "p_model": 0.25, "removed_by": None,
                                 "logprob": -0.693147, "logprob_model": -1.386294},
                                {"id": 9, "text": " b", "p": 0.0, "p_model": 0.125, "removed_by": "top_p",
                                 "logprob": None, "logprob_model": -2.079442}]},
              # a Result from before the log-probabilities were kept: they come from the rounded p
              {"id": 6, "text": "!", "p": 0.25, "entropy": 0.1, "p_model": 0.5, "entropy_model": 1.0, "top": None,
               "draft": None}]
    return {"spec": RunSpec(strategy="sampling").to_dict(), "tokens": tokens, "prefix": prefix}


def test_the_csv_has_a_line_per_position_the_forced_ones_first():
    branched = _result({"ids": [7, 8], "text": "Once upon", "pieces": ["Once", " upon"]})
    rows = list(csv.DictReader(io.StringIO(logprobs_csv([None, branched], ["1: greedy", "2: sampling"]))))
    assert [(r["column"], r["position"], r["forced"], r["text"]) for r in rows] == [
        ("2", "0", "True", "Once"), ("2", "1", "True", " upon"), ("2", "2", "False", " a"), ("2", "3", "False", "!")]
    assert rows[0]["logprob_raw"] == rows[0]["logprob_processed"] == ""  # forced: never drawn
    assert float(rows[2]["logprob_processed"]) == -0.693147 and float(rows[2]["logprob_raw"]) == -1.386294
    assert float(rows[3]["logprob_processed"]) == pytest.approx(math.log(0.25), abs=1e-6)
    assert float(rows[3]["entropy_raw"]) == 1.0 and float(rows[3]["entropy_processed"]) == 0.1


def test_the_json_names_the_column_and_each_alternative_s_cut():
    exported = json.loads(logprobs_json([_result()], ["1: sampling · top-p"]))
    assert exported["units"] == "natural log"
    column = exported["columns"][0]
    assert (column["column"], column["label"], column["strategy"]) == (1, "1: sampling · top-p", "sampling")
    assert column["tokens"][0]["top"][1] == {"id": 9, "text": " b", "logprob_raw": -2.079442,
                                             "logprob_processed": None, "removed_by_stage": "top_p"}

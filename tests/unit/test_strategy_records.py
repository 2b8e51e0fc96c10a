"""The built-in strategies' own records land in the Result where they always have (a contract): built by each
entry's declared builders, the same keys on every strategy's Result, null where another strategy ran."""

from __future__ import annotations

import json

import pytest

from playground import registry
from playground.backends.base import GenerationOutput
from playground.result import build_result
from playground.spec import RunSpec
from tests.helpers import tiny_loaded

TOKENS = [104, 105]


def _output(**recorded) -> GenerationOutput:
    return GenerationOutput(sequences=[list(TOKENS)], start_time=0.0, token_times=[0.1, 0.2], kv_cache_bytes=0,
                            **recorded)


@pytest.fixture(scope="module")
def loaded():
    return tiny_loaded()


def _text(loaded, token: int) -> str:
    return loaded.tokenizer.decode([token])


def _result(loaded, strategy: str, output: GenerationOutput, **spec) -> dict:
    built = build_result(RunSpec(strategy=strategy, **spec), loaded, 3, output, 1.0, 0.0, None)
    return json.loads(json.dumps(built))  # as the CLI and the API hand it out


def test_contrastive_searchs_candidates_and_dolas_contrast_land_in_their_token_keys(loaded):
    candidates = [(105, 0.5, 0.9, -0.2), (104, 0.4, 0.1, 0.1)]
    contrastive = _result(loaded, "contrastive", _output(token_info=[{"candidates": candidates}] * 2))
    assert contrastive["tokens"][0]["contrastive"] == [
        {"id": 105, "text": _text(loaded, 105), "p": 0.5, "penalty": 0.9, "score": -0.2},
        {"id": 104, "text": _text(loaded, 104), "p": 0.4, "penalty": 0.1, "score": 0.1}]
    assert contrastive["tokens"][0]["dola"] is None and contrastive["tokens"][0]["draft"] is None
    dola = {"layer": 2, "layers": [0, 2], "js": [0.1, 0.2], "final_top": 105}
    contrasted = _result(loaded, "dola", _output(token_info=[{"dola": dola}] * 2))
    assert [t["dola"]["changed"] for t in contrasted["tokens"]] == [True, False]  # 104 was not the final top
    assert contrasted["tokens"][0]["dola"] == {"layer": 2, "layers": [0, 2], "js": [0.1, 0.2], "greedy_id": 105,
                                               "greedy_text": _text(loaded, 105), "changed": True}
    assert contrasted["tokens"][0]["contrastive"] is None


def test_assisted_decodings_drafts_and_steps_and_the_beam_tree_land_in_their_keys(loaded):
    steps = [{"drafted": [104, 106], "accepted": 1}]
    assisted = _result(loaded, "assisted", _output(draft_flags=[True, False], assisted_steps=steps,
                                                   extra={"draft_tokens_proposed": 2}), prompt_lookup=3)
    assert [t["draft"] for t in assisted["tokens"]] == [True, False]
    assert assisted["assisted_steps"] == [{"drafted": [104, 106], "accepted": 1,
                                          "drafted_text": [_text(loaded, 104), _text(loaded, 106)]}]
    assert assisted["extra"]["draft_tokens_proposed"] == 2 and assisted["beam_tree"] is None
    node = {"parent": None, "token": 104, "score": -0.123456, "kept": True, "finished": False, "chosen": True}
    beam = _result(loaded, "beam", _output(beam_tree=[[node]]))
    assert beam["beam_tree"] == [[{**node, "text": _text(loaded, 104), "score": -0.12346}]]
    assert beam["assisted_steps"] is None


def test_every_strategys_result_has_every_registered_strategys_keys(loaded):
    token_keys = {d.key for s in registry.strategies() for d in s.token_records}
    run_keys = {d.key for s in registry.strategies() for d in s.run_records if not d.in_extra}
    assert token_keys == {"draft", "contrastive", "dola"} and run_keys == {"beam_tree", "assisted_steps"}
    greedy = _result(loaded, "greedy", _output(token_info=[{}, {}]))
    assert all(greedy["tokens"][0][key] is None for key in token_keys)
    assert all(greedy[key] is None for key in run_keys)

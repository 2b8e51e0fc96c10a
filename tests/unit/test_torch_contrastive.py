"""Contrastive search on the PyTorch path (playground/backends/torch/contrastive.py), run through transformers 5's
generate(custom_generate=...), gives transformers 4.52.4's tokens exactly (tests/references/guide_methods.json),
records what decided each token, and leaves the cache as 4.52 did."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from playground.backends.torch.contrastive import ContrastiveStep, contrastive_search
from tests.unit.test_guide_references import (
    REFERENCES,
    bundled_cases,
    record_by_id,
    record_cases,
    records,
    shared_model,
    weights_module,
)

CONTRASTIVE = records("contrastive_search")
TINY = records("contrastive_search", "tiny")
BUNDLED = records("contrastive_search", "bundled")
ON_EOS = "tiny-8l/p1/contrastive_search/alpha0.6-k4"  # stops on eos after 18 tokens


def _generate(model, reference: dict, **kwargs):
    """generate() as the references were recorded (an all-ones mask, the record's kwargs) with our loop."""
    ids = torch.tensor([reference["prompt_ids"]])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), custom_generate=contrastive_search,
                         **reference["generate_kwargs"], **kwargs)
    sequences = out.sequences if kwargs.get("return_dict_in_generate") else out
    return ids.shape[1], sequences[0, ids.shape[1]:].tolist(), out


def _assert_parity(model, record: dict) -> None:
    assert weights_module().weights_digest(model) == REFERENCES["models"][record["model"]]["weights_digest"]
    _, new, _ = _generate(model, record)
    (expected,) = record["output"]["sequences"]
    assert new[:len(expected)] == expected
    assert len(new) == len(expected)  # it stopped where 4.52 did (on eos or at max_new_tokens)


def test_the_references_hold_every_contrastive_setting_on_every_model():
    assert len(TINY) == 12 and len(BUNDLED) == 4
    assert {tuple(sorted(r["generate_kwargs"].items())) for r in CONTRASTIVE} == {
        tuple(sorted({"do_sample": False, "eos_token_id": e, "pad_token_id": e, "max_new_tokens": 32,
                      "num_return_sequences": 1, "penalty_alpha": a, "top_k": k}.items()))
        for e in {r["generate_kwargs"]["eos_token_id"] for r in CONTRASTIVE} for a, k in ((0.6, 4), (0.3, 6))}


# the fast lane: every model and setting on the second prompt (the first prompt's records: the full suite)
@pytest.mark.parametrize("record", record_cases("contrastive_search", "tiny", first_prompt=(pytest.mark.slow,)))
def test_tiny_models_give_transformers_4_52_tokens(record):
    _assert_parity(shared_model(record["model"]), record)


def test_the_last_hidden_state_is_after_the_final_norm_as_in_4_52():
    """4.52's LlamaModel appended the normed output as hidden_states[-1]; transformers 5 records layer outputs
    and swaps the last for last_hidden_state. The penalty is computed on it, so check it is that tensor."""
    model = shared_model("tiny-8l")
    ids = torch.tensor([TINY[0]["prompt_ids"]])
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        normed = model.model(ids).last_hidden_state
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    assert torch.equal(out.hidden_states[-1], normed)
    assert not torch.equal(out.hidden_states[-1], out.hidden_states[-2])


def test_the_recorder_holds_each_tokens_candidates_and_the_score_that_chose():
    record = record_by_id("tiny-2l/p1/contrastive_search/alpha0.6-k4")
    alpha, k = record["generate_kwargs"]["penalty_alpha"], record["generate_kwargs"]["top_k"]
    steps: list[ContrastiveStep] = []
    emitted: list[int] = []
    _, new, _ = _generate(shared_model("tiny-2l"), record, record=steps, emit=emitted.extend)
    assert emitted == new and len(steps) == len(new) == 32
    for step, token in zip(steps, new, strict=True):
        assert step.row == 0
        assert len(step.candidates) == len(step.probs) == len(step.penalties) == len(step.scores) == k
        assert len(set(step.candidates)) == k and step.probs == sorted(step.probs, reverse=True)
        assert step.candidates[step.chosen] == token
        assert step.scores[step.chosen] == max(step.scores)
        assert all(-1.0 - 1e-5 <= p <= 1.0 + 1e-5 for p in step.penalties)
        assert step.scores == pytest.approx([(1 - alpha) * p - alpha * d
                                             for p, d in zip(step.probs, step.penalties, strict=True)], abs=1e-6)
    # on the repetitive prompt the penalty decides: some tokens are not the most probable candidate
    assert any(step.chosen != 0 for step in steps)


@pytest.mark.parametrize("return_dict", [True, False])
def test_the_cache_holds_the_prompt_and_the_new_tokens_but_the_last(return_dict):
    """4.52 caches the chosen candidate in the look-ahead forward and crops that one position at the end (it
    cropped only with return_dict_in_generate; we always do). What is kept is what a plain forward computes."""
    record = record_by_id(ON_EOS)
    model = shared_model(record["model"])
    cache = DynamicCache(config=model.config)
    prompt_len, new, out = _generate(model, record, past_key_values=cache, return_dict_in_generate=return_dict)
    assert new[-1] == record["generate_kwargs"]["eos_token_id"] and len(new) == 18
    assert cache.get_seq_length() == prompt_len + len(new) - 1
    if return_dict:
        assert out.past_key_values is cache
    fresh = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.tensor([record["prompt_ids"] + new[:-1]]), past_key_values=fresh, use_cache=True)
    for ours, plain in zip(cache.layers, fresh.layers, strict=True):
        assert ours.keys.shape == plain.keys.shape and ours.keys.shape[0] == 1
        torch.testing.assert_close(ours.keys, plain.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(ours.values, plain.values, atol=1e-5, rtol=1e-4)


def test_scores_and_logits_come_back_per_step_when_asked():
    record = record_by_id(ON_EOS)
    _, new, out = _generate(shared_model(record["model"]), record, return_dict_in_generate=True, output_scores=True,
                            output_logits=True)
    assert len(out.scores) == len(out.logits) == len(new)
    assert [int(s.argmax()) for s in out.scores][:1] == [int(out.logits[0].argmax())]


def test_what_it_cannot_run_is_refused_with_a_reason():
    record = record_by_id(ON_EOS)
    model = shared_model(record["model"])
    with pytest.raises(ValueError, match="DynamicCache"):
        _generate(model, record, cache_implementation="static")
    ids = torch.tensor([record["prompt_ids"]])
    with pytest.raises(ValueError, match="penalty_alpha"):
        model.generate(ids, custom_generate=contrastive_search, max_new_tokens=2, do_sample=False,
                       pad_token_id=256)


@pytest.mark.slow
@pytest.mark.parametrize("record", bundled_cases("contrastive_search"))
def test_smollm2_gives_transformers_4_52_tokens(record):
    from tests.helpers import bundled

    _assert_parity(bundled("smollm2-135m").model, record)

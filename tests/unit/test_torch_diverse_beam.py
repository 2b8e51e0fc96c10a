"""Diverse (group) beam search on the PyTorch path (playground/backends/torch/diverse_beam.py), run through
transformers 5's generate(custom_generate=...), gives transformers 4.52.4's sequences and sequences_scores
(tests/references/guide_methods.json), records the beam tree by group with the penalties paid, and refuses what
it does not cover."""

from __future__ import annotations

import pytest
import torch

from playground.backends.group_tree import DiverseBeamStep
from playground.backends.torch.diverse_beam import diverse_beam_search
from tests.unit.test_guide_references import (
    REFERENCES,
    bundled_cases,
    record_by_id,
    records,
    shared_model,
    weights_module,
)

BEAMS = records("diverse_beam_search")
TINY = records("diverse_beam_search", "tiny")
BUNDLED = records("diverse_beam_search", "bundled")


def _generate(model, reference: dict, **kwargs):
    """generate() as the references were recorded (an all-ones mask, the record's kwargs, scores asked for)."""
    ids = torch.tensor([reference["prompt_ids"]])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), custom_generate=diverse_beam_search,
                         return_dict_in_generate=True, output_scores=True,
                         **{**reference["generate_kwargs"], **kwargs})
    eos = {**reference["generate_kwargs"], **kwargs}["eos_token_id"]
    new = []
    for row in out.sequences[:, ids.shape[1]:].tolist():  # cut after the first eos, as the file holds them
        new.append(row[:row.index(eos) + 1] if eos in row else row)
    return new, out


def _assert_parity(model, record: dict) -> None:
    assert weights_module().weights_digest(model) == REFERENCES["models"][record["model"]]["weights_digest"]
    new, out = _generate(model, record)
    assert new == record["output"]["sequences"]
    assert out.sequences_scores.tolist() == pytest.approx(record["output"]["sequences_scores"], abs=1e-4)


def test_the_references_hold_one_diverse_setting_on_every_model():
    assert len(TINY) == 6 and len(BUNDLED) == 2
    assert {tuple(sorted({k: v for k, v in r["generate_kwargs"].items() if "token_id" not in k}.items()))
            for r in BEAMS} == {tuple(sorted({"diversity_penalty": 1.0, "do_sample": False, "early_stopping": False,
                                              "length_penalty": 1.0, "max_new_tokens": 32, "num_beam_groups": 2,
                                              "num_beams": 4, "num_return_sequences": 4}.items()))}


@pytest.mark.parametrize("record", TINY, ids=[r["id"] for r in TINY])
def test_tiny_models_give_transformers_4_52_sequences_and_scores(record):
    _assert_parity(shared_model(record["model"]), record)


def test_the_recorder_holds_each_beam_by_group_with_the_penalty_it_paid():
    """A small penalty, so that group 1 sometimes still takes group 0's token and pays for it, and an eos that
    the best beams reach (a token of the recorded best sequence), so that hypotheses finish on the way."""
    record = record_by_id("tiny-2l/p1/diverse_beam_search/beams4-groups2-div1.0")
    model, eos = shared_model(record["model"]), record["output"]["sequences"][0][4]
    knobs = {"diversity_penalty": 1e-3, "eos_token_id": eos, "max_new_tokens": 12, "output_logits": True}
    steps: list[DiverseBeamStep] = []
    new, out = _generate(model, record, record=steps, **knobs)
    assert new == _generate(model, record, **knobs)[0]  # recording changes nothing
    running = [s for s in steps if not s.finished]
    assert [(s.step, s.beam, s.group) for s in running] == [(t, b, b // 2) for t in range(12) for b in range(4)]
    by = {(s.step, s.beam): s for s in running}
    for s in steps:
        assert s.parent // 2 == s.group and (s.beam == -1) == s.finished and (s.token == eos) == s.finished
        earlier = [by[(s.step, b)].token for b in range(2 * s.group)]  # what the earlier groups chose this step
        assert s.penalty == pytest.approx(1e-3 * earlier.count(s.token))
        before = by[(s.step - 1, s.parent)] if s.step else None
        assert s.paid == pytest.approx(s.penalty + (before.paid if before else 0.0))
        # the score added is the token's log-probability less the penalty (out.scores hold it per parent row)
        added = float(out.scores[s.step][s.parent, s.token])
        logprob = float(torch.log_softmax(out.logits[s.step][s.parent], dim=-1)[s.token])
        assert added == pytest.approx(logprob - s.penalty, abs=1e-5)
        assert s.score == pytest.approx((before.score if before else 0.0) + added, abs=1e-4)
    assert any(s.penalty > 0 for s in steps if s.group == 1) and all(s.penalty == 0 for s in steps if s.group == 0)
    # every returned sequence is a recorded path, scored over its length; a finished one's length counts its eos
    ends = [(_path(by, s.step - 1, s.parent) + [eos], s) for s in steps if s.finished]
    ends += [(_path(by, 11, b), by[(11, b)]) for b in range(4)]
    assert any(tokens[-1] == eos for tokens in new)
    for tokens, score in zip(new, out.sequences_scores.tolist(), strict=True):
        # two groups may reach the same tokens (a small penalty), having paid differently: match on both
        assert any(path == tokens and end.step + 1 == len(tokens) and abs(end.score / len(tokens) - score) < 1e-5
                   for path, end in ends), tokens


def _path(by: dict, step: int, beam: int) -> list[int]:
    tokens: list[int] = []
    for t in range(step, -1, -1):
        tokens.append(by[(t, beam)].token)
        beam = by[(t, beam)].parent
    return tokens[::-1]


def test_penalty_in_score_false_returns_each_sequence_own_log_probability():
    """With a small penalty group 1 pays and keeps some beams anyway: 4.52 leaves what they paid in their scores,
    penalty_in_score=False gives each sequence its own mean log-probability (one teacher-forced pass)."""
    record = record_by_id("tiny-2l/p1/diverse_beam_search/beams4-groups2-div1.0")
    model, knobs = shared_model(record["model"]), {"diversity_penalty": 1e-3, "max_new_tokens": 12}
    first, as_452 = _generate(model, record, **knobs)
    new, out = _generate(model, record, penalty_in_score=False, **knobs)
    assert sorted(out.sequences_scores.tolist(), reverse=True) == out.sequences_scores.tolist()
    own = {}
    for tokens, score in zip(new, out.sequences_scores.tolist(), strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([record["prompt_ids"] + tokens])).logits[0, len(record["prompt_ids"]) - 1:-1]
        own[tuple(tokens)] = float(torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(tokens)[:, None]).sum())
        assert score == pytest.approx(own[tuple(tokens)] / len(tokens), abs=1e-5)
    # the same sequences come back under 4.52's scores, lower by what their beams paid (some paid)
    paid = [own[tuple(t)] / 12 - s for t, s in zip(first, as_452.sequences_scores.tolist(), strict=True)]
    assert set(map(tuple, first)) == set(own) and min(paid) > -1e-5 and max(paid) > 1e-3 / 12 - 1e-5, paid


def test_what_it_cannot_run_is_refused_with_a_reason():
    record = record_by_id("tiny-2l/p0/diverse_beam_search/beams4-groups2-div1.0")
    model = shared_model(record["model"])
    with pytest.raises(ValueError, match="diversity_penalty > 0"):
        _generate(model, record, diversity_penalty=0.0)
    with pytest.raises(ValueError, match="one prompt"):
        ids = torch.tensor([record["prompt_ids"]] * 2)
        model.generate(ids, custom_generate=diverse_beam_search, **record["generate_kwargs"])
    with pytest.raises(ValueError, match="use_cache"):
        _generate(model, record, use_cache=False)
    with pytest.raises(ValueError, match="do_sample=False"):
        _generate(model, record, do_sample=True)


@pytest.mark.slow
@pytest.mark.parametrize("record", bundled_cases("diverse_beam_search"))
def test_smollm2_gives_transformers_4_52_sequences_and_scores(record):
    from tests.helpers import bundled

    _assert_parity(bundled("smollm2-135m").model, record)


@pytest.mark.slow
@pytest.mark.parametrize("record", BUNDLED, ids=[r["id"] for r in BUNDLED])  # both prompts: p1 is the case below
def test_smollm2_without_the_penalty_in_the_score_returns_own_log_probabilities(record):
    """The recorder's teacher-forced log-probabilities (4 decimals) over each sequence's length, eos counted: in
    p1 the 3rd and 4th sequences come back 1.0/32 higher than 4.52 scored them."""
    from tests.helpers import bundled

    new, out = _generate(bundled("smollm2-135m").model, record, penalty_in_score=False)
    expected = {tuple(tokens): logprob / len(tokens) for tokens, logprob in
                zip(record["output"]["sequences"], record["diagnostics"]["sequence_logprobs"], strict=True)}
    assert set(map(tuple, new)) == set(expected)
    for tokens, score in zip(new, out.sequences_scores.tolist(), strict=True):
        assert score == pytest.approx(expected[tuple(tokens)], abs=1e-4)

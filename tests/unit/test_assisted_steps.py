"""Assisted decoding per verification step: drafted and accepted tokens as transformers decided them, for a draft
model, a draft model with another tokenizer (universal assisted decoding) and prompt lookup."""

from __future__ import annotations

import pytest
import torch

from playground.models.loaded import LoadedModel
from playground.spec import RunSpec
from playground.strategy_records.assisted import assisted_steps
from tests.helpers import (
    BYTE_VOCAB,
    PROMPT_TEXT,
    byte_tokenizer,
    same_weights_other_tokenizer,
    tiny_llama,
    tiny_loaded,
    torch_run,
)


def run(spec: RunSpec, draft: LoadedModel | None = None):
    main = tiny_loaded()
    ids = torch.tensor([main.tokenizer.encode(PROMPT_TEXT)])
    out, _ = torch_run(main, ids, spec, draft=draft)
    return out


CASES = {
    "draft model": (RunSpec(strategy="assisted", assistant="tiny-same", max_new_tokens=24),
                    lambda: tiny_loaded(model=tiny_llama(0))),
    "universal assisted": (RunSpec(strategy="assisted", assistant="tiny-other", max_new_tokens=24),
                           same_weights_other_tokenizer),
    "prompt lookup": (RunSpec(strategy="assisted", prompt_lookup=3, max_new_tokens=24), lambda: None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_steps_add_up_to_the_draft_flags_and_the_acceptance_rate(case):
    spec, draft = CASES[case]
    out = run(spec, draft())
    steps = out.assisted_steps
    assert steps and all(0 <= s["accepted"] <= len(s["drafted"]) for s in steps)
    accepted, drafted = sum(s["accepted"] for s in steps), sum(len(s["drafted"]) for s in steps)
    # the streamer's chunks (accepted drafts + the main model's own token) are an independent count
    assert sum(out.draft_flags) == accepted
    assert len(steps) == out.forward_passes  # one verification pass per step
    assert sum(s["accepted"] + 1 for s in steps) == len(out.sequences[0])
    assert out.acceptance_rate == pytest.approx(accepted / drafted)
    assert out.extra["draft_tokens_proposed"] == drafted
    # drafted tokens are what the main model verified: ids in its vocabulary, and the accepted ones are the output
    position = 0
    for step in steps:
        assert all(0 <= i < BYTE_VOCAB for i in step["drafted"])
        assert out.sequences[0][position:position + step["accepted"]] == step["drafted"][:step["accepted"]]
        position += step["accepted"] + 1


def test_a_draft_with_the_main_models_weights_is_accepted_whole():
    spec, draft = CASES["draft model"]
    out = run(spec, draft())
    steps = out.assisted_steps
    assert sum(len(s["drafted"]) for s in steps) > 0
    # every step but the last (cut at max_new_tokens) keeps all it drafted
    assert all(s["accepted"] == len(s["drafted"]) for s in steps[:-1])
    assert out.acceptance_rate > 0.9


def test_a_draft_of_other_weights_is_rejected_and_the_rejected_tokens_are_kept():
    other = tiny_loaded(model=tiny_llama(7))
    out = run(RunSpec(strategy="assisted", assistant="tiny-7", max_new_tokens=16), other)
    rejected = [s["drafted"][s["accepted"]:] for s in out.assisted_steps]
    assert any(rejected)
    # a rejected draft's first token is not what the main model produced at that position
    position = 0
    for step in out.assisted_steps:
        if step["accepted"] < len(step["drafted"]) and position + step["accepted"] < len(out.sequences[0]):
            assert out.sequences[0][position + step["accepted"]] != step["drafted"][step["accepted"]]
        position += step["accepted"] + 1
    records = assisted_steps(byte_tokenizer(), out)
    assert records is not None and records[0]["drafted_text"] == [byte_tokenizer().decode([i])
                                                                   for i in out.assisted_steps[0]["drafted"]]


def test_other_strategies_record_no_steps():
    assert run(RunSpec(max_new_tokens=4)).assisted_steps is None


def test_token_view_strikes_rejected_drafts_before_the_token_that_replaced_them():
    from playground.ui.assist_view import AssistedView, assist_strip_html
    from playground.ui.strategy_view import view_of
    from playground.ui.tokens import tokens_html

    texts = ["A", "B", "C", "D", "E"]
    tokens = [{"id": i, "text": t, "p": None, "entropy": None, "p_model": None, "entropy_model": None, "top": None,
               "draft": d} for i, (t, d) in enumerate(zip(texts, [True, False, False, True, False], strict=True))]
    # step 1 drafted A x y, kept A, then B is the main model's; step 2 drafted nothing (C); step 3 drafted D z, kept D
    steps = [{"drafted": [0, 9, 9], "drafted_text": ["A", "x", "y"], "accepted": 1},
             {"drafted": [], "drafted_text": [], "accepted": 0},
             {"drafted": [3, 8], "drafted_text": ["D", "z"], "accepted": 1}]
    assisted = view_of("assisted")
    assert isinstance(assisted, AssistedView)  # the registry's entry names it
    result = {"tokens": tokens, "assisted_steps": steps}
    view = tokens_html(tokens, view=assisted, result=result)
    order = [view.index(f">{t}</span>") for t in ["A", "xy", "B", "C", "D", "z", "E"]]
    assert order == sorted(order)
    assert view.count("tok rejected") == 2
    strip = assist_strip_html(steps)
    assert strip.count("class='assist-bar") == 3 and "2 of 5 drafted tokens accepted" in strip
    assert view.count("class='tok draft'") == 2 and "accepted draft token" in view
    assert tokens_html(tokens).count("rejected") == 0  # another strategy's view draws none of it
    assert "class='tok draft'" not in tokens_html(tokens)

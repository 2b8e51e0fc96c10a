"""DoLa on the PyTorch path (playground/backends/torch/dola.py), run through transformers 5's
generate(custom_generate=...), gives transformers 4.52.4's tokens and layer choices exactly (tests/references/
guide_methods.json), records what decided each token, and refuses what it cannot give 4.52's result for."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache, LlamaConfig

from playground.backends.torch.dola import DolaStep, candidate_layers, dola_decoding
from tests.unit.test_guide_references import (
    REFERENCES,
    bundled_cases,
    record_by_id,
    record_cases,
    records,
    shared_model,
    weights_module,
)

DOLA = records("dola")
TINY = records("dola", "tiny")
BUNDLED = records("dola", "bundled")
MIXED = "tiny-8l/p1/dola/high-rep1.2"  # layers 4 and 6 both chosen; the contrast changes every token


def _generate(model, reference: dict, ids: torch.Tensor | None = None, **kwargs):
    """generate() as the references were recorded (an all-ones mask, the record's kwargs) with our loop."""
    ids = torch.tensor([reference["prompt_ids"]]) if ids is None else ids
    kwargs = {"attention_mask": torch.ones_like(ids), **reference["generate_kwargs"], **kwargs}
    out = model.generate(ids, custom_generate=dola_decoding, **kwargs)
    sequences = out.sequences if kwargs.get("return_dict_in_generate") else out
    return sequences[:, ids.shape[1]:].tolist(), out


def _assert_parity(model, record: dict) -> None:
    assert weights_module().weights_digest(model) == REFERENCES["models"][record["model"]]["weights_digest"]
    steps: list[DolaStep] = []
    (new,), _ = _generate(model, record, record=steps)
    (expected,) = record["output"]["sequences"]
    assert new[:len(expected)] == expected
    assert len(new) == len(expected)  # it stopped where 4.52 did
    assert [s.premature for s in steps] == record["diagnostics"]["premature_layers"]


def test_the_references_hold_both_dola_settings_on_every_model():
    assert len(TINY) == 12 and len(BUNDLED) == 4
    assert {tuple(sorted(r["generate_kwargs"].items())) for r in DOLA} == {
        tuple(sorted({"do_sample": False, "eos_token_id": e, "pad_token_id": e, "max_new_tokens": 32,
                      "repetition_penalty": 1.2, "dola_layers": layers}.items()))
        for e in {r["generate_kwargs"]["eos_token_id"] for r in DOLA} for layers in ("low", "high")}


@pytest.mark.parametrize("name", sorted(REFERENCES["models"]))
def test_low_and_high_are_the_layers_4_52_chose(name):
    entry = REFERENCES["models"][name]
    config = LlamaConfig(**entry["config_values"])  # SmolLM2 needs only its config: 30 layers, tied
    model = SimpleNamespace(config=config)
    assert {s: candidate_layers(model, s) for s in ("low", "high")} == entry["dola_candidate_layers"]


def test_the_other_layer_rules_of_4_52():
    def model(layers: int, tied: bool) -> SimpleNamespace:
        return SimpleNamespace(config=LlamaConfig(num_hidden_layers=layers, tie_word_embeddings=tied))

    assert candidate_layers(model(48, False), "low") == list(range(0, 20, 2))  # over 40 layers: 20 each end
    assert candidate_layers(model(48, True), "high") == list(range(28, 48, 2))
    assert candidate_layers(model(5, True), "low") == [2] and candidate_layers(model(5, True), "high") == [2, 4]
    assert candidate_layers(model(2, True), "low") == [1] == candidate_layers(model(2, True), "high")
    assert candidate_layers(model(1, True), "low") == [0]
    assert candidate_layers(model(8, False), [1, 3, 8, 9]) == [1, 3]  # indices >= N dropped, as 4.52 did
    for bad in (None, "middle", [8, 9], [-1, 2], []):
        with pytest.raises(ValueError, match="dola_layers"):
            candidate_layers(model(8, False), bad)


# the fast lane: every model and setting on the second prompt (the first prompt's records: the full suite)
@pytest.mark.parametrize("record", record_cases("dola", "tiny", first_prompt=(pytest.mark.slow,)))
def test_tiny_models_give_transformers_4_52_tokens_and_layers(record):
    _assert_parity(shared_model(record["model"]), record)


def test_hidden_states_hold_what_4_52_fed_lm_head():
    """4.52's LlamaModel collected each layer's input, then the final norm's output. transformers 5 records layer
    outputs by hooks and swaps the last for last_hidden_state: the same tensors, checked here, so the candidates
    (indices < N) are the raw residual stream and only [N] is normed."""
    model = shared_model("tiny-8l")
    ids = torch.tensor([TINY[0]["prompt_ids"]])
    layer_outputs: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(lambda _m, _a, out: layer_outputs.append(out)) for layer in model.model.layers]
    try:
        with torch.no_grad():
            hidden = model(ids, output_hidden_states=True).hidden_states
    finally:
        for hook in hooks:
            hook.remove()
    assert len(hidden) == model.config.num_hidden_layers + 1
    assert torch.equal(hidden[0], model.model.embed_tokens(ids))
    for i in range(1, len(hidden) - 1):
        assert torch.equal(hidden[i], layer_outputs[i - 1])
    assert torch.equal(hidden[-1], model.model.norm(layer_outputs[-1]))


def test_the_recorder_holds_each_tokens_layer_divergences_and_whether_the_contrast_changed_it():
    record = record_by_id(MIXED)
    model = shared_model(record["model"])
    steps: list[DolaStep] = []
    (new,), out = _generate(model, record, record=steps, return_dict_in_generate=True, output_logits=True)
    assert [s.token for s in steps] == new and len(steps) == 32
    for step, logits in zip(steps, out.logits, strict=True):
        assert step.row == 0 and step.layers == [4, 6] and len(step.js) == 2
        assert all(d > 0 for d in step.js)
        assert step.premature == step.layers[max(range(2), key=step.js.__getitem__)]
        assert step.final_top == int(logits[0].argmax())  # the final layer's own choice, before any processor
        assert step.changed == (step.token != step.final_top)
    assert {s.premature for s in steps} == {4, 6}
    # on tiny-8l/p0 'low' the contrast changed one token only: both cases are shown
    few: list[DolaStep] = []
    _generate(model, record_by_id("tiny-8l/p0/dola/low-rep1.2"), record=few)
    assert sum(s.changed for s in few) == 1


def test_tokens_stream_through_emit_one_step_at_a_time():
    record = record_by_id("tiny-2l/p1/dola/high-rep1.2")
    chunks: list[list[int]] = []
    (new,), _ = _generate(shared_model(record["model"]), record, emit=chunks.append)
    assert chunks == [[token] for token in new] and len(new) == 32


def test_the_layer_is_chosen_once_for_the_whole_batch_as_in_4_52():
    """4.52 averages the divergences over the rows: a row can be contrasted with a layer that is not its own best."""
    record = record_by_id(MIXED)
    prompts = [REFERENCES["models"]["tiny-8l"]["prompts"][p]["ids"] for p in ("p0", "p1")]
    width = max(map(len, prompts))
    ids = torch.tensor([[256] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    steps: list[DolaStep] = []
    _generate(shared_model("tiny-8l"), record, ids, attention_mask=mask, record=steps, max_new_tokens=16)
    own_best = 0
    for first, second in zip(steps[::2], steps[1::2], strict=True):
        assert (first.row, second.row) == (0, 1) and first.premature == second.premature
        mean = [(a + b) / 2 for a, b in zip(first.js, second.js, strict=True)]
        assert first.premature == first.layers[max(range(len(mean)), key=mean.__getitem__)]
        own_best += sum(s.layers[max(range(2), key=s.js.__getitem__)] != s.premature for s in (first, second))
    assert own_best > 0


def test_norm_premature_puts_the_candidates_through_the_final_norm():
    """The switch for 4.52's un-normed candidates: off reproduces the references (above); on changes the tokens."""
    record = record_by_id("tiny-2l/p0/dola/low-rep1.2")
    (normed,), _ = _generate(shared_model(record["model"]), record, norm_premature=True)
    assert normed != record["output"]["sequences"][0]


def test_sampling_draws_from_the_tokens_the_final_layer_finds_plausible():
    """DoLa with do_sample, as 4.52 allowed: repeatable under a seed, every token within the relative-top set
    (p_final >= 0.1 * max p_final), and not just the argmax."""
    record = record_by_id("tiny-8l/p0/dola/high-rep1.2")
    model = shared_model(record["model"])
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        steps: list[DolaStep] = []
        (new,), _ = _generate(model, record, do_sample=True, max_new_tokens=16, record=steps)
        runs.append(new)
    assert runs[0] == runs[1] and any(s.changed for s in steps)
    prompt = record["prompt_ids"]
    with torch.no_grad():
        logp = model(torch.tensor([prompt + new])).logits[0, len(prompt) - 1:-1].log_softmax(-1)
    chosen = logp.gather(1, torch.tensor(new)[:, None]).squeeze(1)
    assert bool((chosen >= logp.max(-1).values + math.log(0.1) - 1e-4).all())


def test_a_passed_cache_a_static_cache_or_none_give_the_same_tokens():
    record = record_by_id("tiny-4l-tied/p0/dola/low-rep1.2")
    model = shared_model(record["model"])
    expected = record["output"]["sequences"][0][:12]
    cache = DynamicCache(config=model.config)
    (new,), out = _generate(model, record, max_new_tokens=12, past_key_values=cache, return_dict_in_generate=True,
                            output_scores=True)
    assert new == expected and out.past_key_values is cache and len(out.scores) == 12
    assert cache.get_seq_length() == len(record["prompt_ids"]) + 11  # the last token was never fed, as in 4.52
    assert _generate(model, record, max_new_tokens=12, cache_implementation="static")[0][0] == expected
    assert _generate(model, record, max_new_tokens=12, use_cache=False)[0][0] == expected


def test_what_it_cannot_run_as_4_52_did_is_refused_with_a_reason():
    record = record_by_id("tiny-2l/p0/dola/low-rep1.2")
    model = shared_model(record["model"])
    ids = torch.tensor([record["prompt_ids"]])
    with pytest.raises(ValueError, match="dola_layers"):
        model.generate(ids, custom_generate=dola_decoding, max_new_tokens=2, do_sample=False, pad_token_id=256)
    with pytest.raises(ValueError, match="dola_layers"):
        _generate(model, record, dola_layers=[5, 9])  # no layer below the model's 2
    with pytest.raises(ValueError, match="num_return_sequences"):
        _generate(model, record, do_sample=True, num_return_sequences=2)
    with pytest.raises(ValueError, match="num_beams"):
        _generate(model, record, num_beams=2)


@pytest.mark.slow
@pytest.mark.parametrize("record", bundled_cases("dola"))
def test_smollm2_gives_transformers_4_52_tokens_and_layers(record):
    from tests.helpers import bundled

    _assert_parity(bundled("smollm2-135m").model, record)

"""The JAX path runs an architecture with PyTorch's greedy tokens, or refuses it with the reason before compiling."""

from __future__ import annotations

import json

import pytest

from playground.backends.jax import loop
from playground.backends.jax.model.architectures import KNOWN_REASONS, VERIFIED, check_architecture, model_type
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from tests.architecture_grid import GRID, PROMPT, build
from tests.helpers import fast_lane_keeps, jax_run, tiny_loaded, torch_greedy

# a quick cross-section; tests/integration/test_architecture_grid.py runs the whole grid
QUICK_PARITY = ["gpt2", "mixtral", "qwen3_moe", "gemma2_sliding"]
QUICK_REFUSED = ["gpt_oss", "gptj", "bloom", "mamba"]


def _no_compiling(*args, **kwargs):
    raise AssertionError("the JAX path started compiling a model it should have refused")


def test_every_verified_type_has_a_case_in_the_grid():
    grid_types = {model_type(build(name).config) for name in GRID}
    assert set(VERIFIED) <= grid_types, set(VERIFIED) - grid_types


# the fast lane decodes one mixture of experts; GPT-2's and Gemma2's layers are checked by the teacher-forced pass
# below, and the full suite decodes each of these
@pytest.mark.parametrize("name", fast_lane_keeps(QUICK_PARITY, keep=QUICK_PARITY.index("mixtral")))
def test_jax_greedy_equals_torch(name):
    model = build(name)
    expected = torch_greedy(model, PROMPT, 12, "dynamic")
    out, _ = jax_run(tiny_loaded(name, model), PROMPT, RunSpec(max_new_tokens=12, backend="jax", cache="static"))
    assert out.sequences[0] == expected


@pytest.mark.parametrize("name", QUICK_REFUSED)
def test_unsupported_architecture_is_refused_before_compiling(name, monkeypatch):
    monkeypatch.setattr(loop, "engine_for", _no_compiling)
    model = build(name)
    with pytest.raises(PlaygroundError, match="backend 'torch'") as refused:
        jax_run(tiny_loaded(name, model), PROMPT, RunSpec(max_new_tokens=4, backend="jax", cache="static"))
    kind = model_type(model.config)
    assert f"model type '{kind}'" in str(refused.value)
    assert KNOWN_REASONS[kind] in str(refused.value)


def test_an_unknown_type_is_refused_with_the_list_of_those_that_run():
    with pytest.raises(PlaygroundError, match="not among the architectures checked") as refused:
        check_architecture({"model_type": "someformer"})
    assert "llama" in str(refused.value) and "gpt2" in str(refused.value)


def test_a_multimodal_config_is_judged_by_its_text_part():
    check_architecture({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}})


def test_preflight_refuses_a_model_on_disk_before_loading(tmp_path, monkeypatch):
    from playground import runner

    folder = tmp_path / "tiny-mamba"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "mamba", "hidden_size": 64}))
    monkeypatch.setattr(runner, "check_available", lambda name: None)
    monkeypatch.setattr(runner, "saved_config", lambda name: json.loads((folder / "config.json").read_text()))
    with pytest.raises(PlaygroundError, match="state-space model"):
        runner.preflight(RunSpec(model=str(folder), backend="jax", cache="static"))
    runner.preflight(RunSpec(model=str(folder), backend="torch"))  # PyTorch runs it: nothing refused


@pytest.mark.parametrize(("name", "after_head"), [
    ("gpt2", {}), ("gemma2_sliding", {"final_logit_softcapping": 0.5}), ("cohere", {"logit_scale": 4.0})])
def test_teacher_forced_logprobs_equal_a_torch_forward_pass(name, after_head):
    """The JAX teacher-forced scan steps the decoder and runs the head once over all its hidden states, through
    the model's own forward: what a model does after its head (Gemma2's soft cap, Cohere's logit scale, set here
    to move a tiny model's small logits a lot) is kept, for models whose decoder is not named `model` too
    (GPT-2). Llama's plain head: test_runner's KL test."""
    from playground.backends.jax.teacher_forced import logprobs_along
    from playground.backends.torch.reference import logprobs_along as torch_logprobs_along

    model = build(name)
    for setting, value in after_head.items():
        setattr(model.config, setting, value)  # read at each forward, or (Cohere's) kept by the model when built:
        if hasattr(model, setting):
            setattr(model, setting, value)
    new_ids = torch_greedy(model, PROMPT, 8, "dynamic")
    expected = torch_logprobs_along(model, PROMPT, new_ids)
    got = logprobs_along(tiny_loaded(name, model), RunSpec(max_new_tokens=8, backend="jax", cache="static"),
                         PROMPT[0].tolist(), new_ids)
    assert got.shape == expected.shape
    assert float((got - expected).abs().max()) < 1e-4

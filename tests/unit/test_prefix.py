"""Forced prefixes (RunSpec.prefix_ids, branching at a token): generation continues from the forced tokens on both
backends, the Result says what was forced, and ids outside the vocabulary are refused before anything loads."""

from __future__ import annotations

import pytest
import torch

from playground import runner
from playground.errors import PlaygroundError
from playground.models import loaded
from playground.spec import RunSpec
from tests.helpers import byte_tokenizer, module_tiny_model, torch_greedy

pytest.importorskip("torchax")

PROMPT = "the lighthouse"
NEW = 10


@pytest.fixture(scope="module")
def local_model(tmp_path_factory):
    with module_tiny_model(tmp_path_factory, seed=4) as path:
        yield path


def greedy(model: str, backend: str = "torch", prefix: tuple[int, ...] = ()) -> dict:
    spec = RunSpec(model=model, backend=backend, cache="static" if backend == "jax" else "dynamic",
                   max_new_tokens=NEW, prefix_ids=prefix)
    return dict(runner.run_to_result(PROMPT, spec))


def test_a_prefix_of_the_run_s_own_tokens_continues_the_same_run(local_model):
    whole = greedy(local_model)["token_ids"]
    branched = greedy(local_model, prefix=tuple(whole[:4]))
    assert branched["token_ids"] == whole[4:] + branched["token_ids"][NEW - 4:]
    assert branched["new_tokens"] == NEW  # max_new_tokens counts the tokens after the prefix


def test_the_branch_starts_from_the_forced_token(local_model):
    whole = greedy(local_model)["token_ids"]
    forced = (whole[2] + 1) % 256  # not what greedy chose at position 2
    branched = greedy(local_model, prefix=(*whole[:2], forced))
    model = loaded.LOADED.get(local_model, "fp32")[0].model
    ids = torch.tensor([byte_tokenizer()(PROMPT).input_ids + [*whole[:2], forced]])
    assert branched["token_ids"] == torch_greedy(model, ids, NEW, "dynamic")
    assert branched["token_ids"] != whole[3:3 + NEW]


def test_both_backends_continue_a_prefix_identically(local_model):
    prefix = (104, 101, 108, 108, 111)
    on_torch, on_jax = greedy(local_model, prefix=prefix), greedy(local_model, "jax", prefix)
    assert on_jax["token_ids"] == on_torch["token_ids"]
    assert on_jax["prefix"] == on_torch["prefix"]


def test_the_result_reports_the_forced_prefix_apart_from_the_prompt(local_model):
    hi = byte_tokenizer()("hi").input_ids
    plain, branched = greedy(local_model), greedy(local_model, prefix=tuple(hi))
    assert plain["prefix"] is None
    assert branched["prefix"] == {"ids": hi, "text": "hi", "pieces": ["h", "i"]}
    assert branched["prompt_tokens"] == plain["prompt_tokens"] == len(PROMPT)
    assert branched["spec"]["prefix_ids"] == hi


def test_ids_outside_the_vocabulary_are_refused_before_the_model_loads(local_model):
    loaded.LOADED.clear()
    with pytest.raises(PlaygroundError, match=r"prefix_ids\[1\]=257 is outside .*vocabulary; allowed: 0 to 256"):
        list(runner.run(PROMPT, RunSpec(model=local_model, prefix_ids=(5, 257))))
    assert loaded.LOADED.keys() == []


@pytest.mark.parametrize(("value", "message"), [
    ([-1], r"prefix_ids\[0\]=-1 is not a token id"),
    ([1.5], r"prefix_ids\[0\]=1.5 is not a token id"),
    ([True], r"prefix_ids\[0\]=True is not a token id"),
    ("1,2", "prefix_ids must be a list of token ids"),
])
def test_malformed_prefixes_are_refused_by_the_spec(value, message):
    with pytest.raises(PlaygroundError, match=message):
        RunSpec.from_dict({"prefix_ids": value})


def test_a_prefix_round_trips_through_json():
    spec = RunSpec.from_json('{"prefix_ids": [1, 2.0, 3]}')
    assert spec.prefix_ids == (1, 2, 3) and hash(spec)
    assert RunSpec.from_dict(spec.to_dict()) == spec


# the fast lane: PyTorch's strategies; JAX continues a prefix in the test above, and its sampling replay of the
# forced draws is test_step_mode's
@pytest.mark.parametrize(("backend", "strategy"), [("torch", "sampling"), ("torch", "beam"), ("torch", "assisted"),
                                                   pytest.param("jax", "sampling", marks=pytest.mark.slow)])
def test_every_strategy_generates_after_the_prompt_and_the_prefix(local_model, backend, strategy):
    """The run with prefix_ids is the backend's own run on the prompt's ids followed by the forced ones (a sampling
    backend replays the forced tokens' draws from the spec's prefix_ids: test_step_mode.py checks those draws)."""
    from tests.helpers import jax_run, torch_run

    knobs = {"backend": backend, "strategy": strategy, "cache": "static" if backend == "jax" else "dynamic",
             "max_new_tokens": 6, "seed": 2, "prompt_lookup": 3 if strategy == "assisted" else 0}
    prefix = (104, 105, 106)
    branched = runner.run_to_result(PROMPT, RunSpec(model=local_model, prefix_ids=prefix, **knobs))
    model = loaded.LOADED.get(local_model, "fp32")[0]
    ids = torch.tensor([byte_tokenizer()(PROMPT).input_ids + list(prefix)])
    direct, _ = (jax_run if backend == "jax" else torch_run)(model, ids, RunSpec(model=local_model, prefix_ids=prefix,
                                                                                 **knobs))
    assert branched["token_ids"] == direct.sequences[0]
    assert branched["prefix"]["ids"] == list(prefix)

"""Runner on a tiny model saved as a local directory: events, streaming, the Result JSON contract, limits."""

import pytest
import torch

from playground import runner
from playground.errors import PlaygroundError
from playground.events import DoneEvent, TextEvent
from playground.models import catalog
from playground.spec import RunSpec
from tests.conftest import byte_tokenizer, tiny_llama

RESULT_KEYS = {"spec", "text", "sequences", "prompt_tokens", "new_tokens", "token_ids", "metrics", "versions"}
METRIC_KEYS = {"load_s", "compile_s", "ttft_s", "total_s", "tokens_per_s", "ms_per_token_p50", "ms_per_token_p90",
               "kv_cache_bytes", "peak_rss_bytes", "acceptance_rate"}


@pytest.fixture
def local_model(tmp_path, monkeypatch):
    """A tiny model saved where local models are allowed; the LRU is emptied around the test."""
    path = tmp_path / "tiny"
    tiny_llama().save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    catalog.LOADED.clear()
    yield str(path)
    catalog.LOADED.clear()


def test_streamed_deltas_add_up_to_the_final_text(local_model):
    events = list(runner.run("héllo wörld", RunSpec(model=local_model, max_new_tokens=24)))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    deltas = [e.delta for e in events if isinstance(e, TextEvent)]
    assert "".join(deltas) == done.result["text"]
    assert done.result["new_tokens"] == len(done.result["token_ids"]) == 24


def test_result_json_has_the_contract_keys(local_model):
    result = runner.run_to_result("abc", RunSpec(model=local_model, max_new_tokens=4))
    assert RESULT_KEYS <= set(result)
    assert set(result["metrics"]) == METRIC_KEYS
    assert result["spec"]["model"] == local_model and result["spec"]["chat"] is False
    assert result["prompt_tokens"] == 3
    assert set(result["versions"]) == {"torch", "transformers", "jax", "torchax", "gradio"}


def test_second_run_finds_the_model_loaded(local_model):
    runner.run_to_result("abc", RunSpec(model=local_model, max_new_tokens=2))
    again = runner.run_to_result("abc", RunSpec(model=local_model, max_new_tokens=2))
    assert again["metrics"]["load_s"] < 0.05


@pytest.mark.parametrize("prompt", ["", "   \n"])
def test_empty_prompt_is_refused(prompt):
    with pytest.raises(PlaygroundError, match="prompt is empty"):
        list(runner.run(prompt, RunSpec()))


def test_prompt_over_the_token_cap_is_refused(local_model, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_TOKENS", "4")
    with pytest.raises(PlaygroundError, match="prompt is 10 tokens; the limit is 4"):
        runner.run_to_result("0123456789", RunSpec(model=local_model))


def test_chat_on_a_model_without_template_is_refused(local_model):
    with pytest.raises(PlaygroundError, match="has no chat template; set chat to false"):
        runner.run_to_result("abc", RunSpec(model=local_model, chat=True))


def test_stop_flag_ends_the_run_and_marks_it(local_model):
    result = None
    for event in runner.run("abc", RunSpec(model=local_model, max_new_tokens=200), should_stop=lambda: True):
        if isinstance(event, DoneEvent):
            result = event.result
    assert result["stopped"] and result["new_tokens"] <= 2


def test_lru_keeps_at_most_capacity_models(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    lru = catalog.ModelLRU(capacity=1)
    for name in ("a", "b"):
        tiny_llama().save_pretrained(tmp_path / name)
        byte_tokenizer().save_pretrained(tmp_path / name)
        lru.get(str(tmp_path / name))
    assert lru.keys() == [(str(tmp_path / "b"), "fp32")]
    _, was_loaded = lru.get(str(tmp_path / "b"))
    assert was_loaded


@pytest.mark.parametrize(("weights", "layer_type"), [("bf16", "Linear"), ("int8", "Linear8bitLt"),
                                                      ("nf4", "Linear4bit")])
def test_weight_precision_is_applied_at_load(local_model, weights, layer_type):
    result = runner.run_to_result("abc", RunSpec(model=local_model, weights=weights, max_new_tokens=4))
    assert result["new_tokens"] == 4
    loaded, _ = catalog.LOADED.get(local_model, weights)
    projection = loaded.model.model.layers[0].self_attn.q_proj
    assert type(projection).__name__ == layer_type
    if weights == "bf16":
        assert projection.weight.dtype == torch.bfloat16
    fp32, _ = catalog.LOADED.get(local_model, "fp32")
    assert loaded.weight_bytes < fp32.weight_bytes

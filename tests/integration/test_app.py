"""The served app: the `run` and `sweep` APIs answer through gradio_client, refuse bad input, and keep serving."""

import pytest

from playground.tools.serve import serve_app

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def app_url():
    with serve_app(env={"HF_HUB_OFFLINE": "1"}, timeout_s=120) as app:
        yield app.url


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


def test_run_endpoint_answers_paris(client):
    result = client.predict("What is the capital of France?", '{"max_new_tokens": 24}', api_name="/run")
    assert "Paris" in result["text"]
    assert result["spec"]["model"] == "smollm2-135m" and result["metrics"]["tokens_per_s"] > 0


@pytest.mark.parametrize(("prompt", "spec", "fragment"), [
    ("", "{}", "prompt is empty"),
    ("hi", "not json", "spec is not valid JSON"),
    ("hi", '{"max_new_tokens": 0}', "max_new_tokens=0 is out of range"),
    ("hi", '{"model": "nope"}', "unknown model 'nope'"),
    ("hi", '{"strategy": "nucleus"}', "strategy 'nucleus' is not one of"),
])
def test_bad_input_is_a_clear_error_and_the_app_keeps_serving(client, prompt, spec, fragment):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=fragment):
        client.predict(prompt, spec, api_name="/run")
    again = client.predict("The capital of France is", '{"max_new_tokens": 4, "chat": false}', api_name="/run")
    assert again["new_tokens"] == 4


def test_a_repeated_jax_request_compiles_nothing(client):
    spec = '{"backend": "jax", "cache": "static", "max_new_tokens": 16, "chat": false}'
    first = client.predict("The capital of France is", spec, api_name="/run")
    second = client.predict("The capital of France is", spec, api_name="/run")
    assert second["metrics"]["compile_s"] == 0.0
    assert second["token_ids"] == first["token_ids"]
    assert second["extra"]["weights_moved_s"] == 0.0  # the engine (weights on the device) was reused


def test_sweep_endpoint_returns_a_row_per_value_and_refuses_bad_input(client):
    from gradio_client.exceptions import AppError

    sweep = '{"knob": "max_new_tokens", "values": [4, 8], "spec": {"chat": false}}'
    result = client.predict("The capital of France is\nOnce upon a time", sweep, api_name="/sweep")
    assert [(r["value"], r["prompt_index"]) for r in result["rows"]] == [(4, 0), (4, 1), (8, 0), (8, 1)]
    assert [a["value"] for a in result["aggregates"]] == [4, 8]
    assert all(r["measures"]["agreement"] == 1.0 for r in result["rows"] if r["value"] == 8)  # greedy = reference
    with pytest.raises(AppError, match="cannot sweep 'seed'"):
        client.predict("stories", '{"knob": "seed", "values": [1, 2]}', api_name="/sweep")

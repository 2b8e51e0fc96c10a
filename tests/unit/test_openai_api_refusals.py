"""The OpenAI-compatible API's refusals that need no model, through the app's own /v1 routes and the official
`openai` client: a value of the wrong type named as a type error, an unknown path or a wrong method in OpenAI's error
shape, and 429 + Retry-After when the generation slot's estimated wait is over PLAYGROUND_API_MAX_WAIT_SECONDS."""

from __future__ import annotations

import openai
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from playground import runner
from playground.generation_slot import Holder
from playground.openai_api import routes

SHAPE = {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def http() -> TestClient:
    return TestClient(FastAPI(routes=routes.api_routes()))


@pytest.fixture(scope="module")
def client(http) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key="unused", max_retries=0, http_client=http)


@pytest.mark.parametrize(("field", "value", "words"), [
    ("max_tokens", "ten", "max_tokens must be an integer, got a string"),
    ("max_tokens", True, "max_tokens must be an integer, got a boolean"),
    ("max_tokens", 2.5, "max_tokens must be an integer, got a number with a fraction"),
    ("n", False, "n must be an integer, got a boolean"),
    ("logprobs", "3", "logprobs must be an integer, got a string"),
    ("temperature", "hot", "temperature must be a number, got a string"),
    ("top_p", [1], "top_p must be a number, got an array"),
    ("presence_penalty", True, "presence_penalty must be a number, got a boolean"),
    ("frequency_penalty", {"a": 1}, "frequency_penalty must be a number, got an object"),
    ("seed", 1.5, "seed must be an integer, got a number with a fraction"),
])
def test_a_numeric_field_of_another_type_is_a_type_error(client, field, value, words):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="smollm2-135m", prompt="hi", extra_body={field: value})
    error = caught.value.body
    assert error["message"].startswith(words) and "out of range" not in error["message"]
    assert error["param"] == field and error["type"] == "invalid_request_error"


def test_a_number_out_of_range_is_still_out_of_range(client):
    with pytest.raises(openai.BadRequestError, match="max_tokens=100000 is out of range"):
        client.completions.create(model="smollm2-135m", prompt="hi", max_tokens=100_000)


def test_a_chat_field_of_another_type_is_a_type_error(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "hi"}],
                                       max_completion_tokens="ten")  # type: ignore[arg-type]
    assert caught.value.body["message"].startswith("max_completion_tokens must be an integer, got a string")


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/v1/completions", 405, "method_not_allowed"),
    ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
    ("POST", "/v1/models", 405, "method_not_allowed"),
    ("GET", "/v1/embeddings", 404, "unknown_url"),
    ("POST", "/v1/nothing/here", 404, "unknown_url"),
])
def test_an_unknown_path_or_a_wrong_method_answers_in_openais_shape(http, method, path, status, code):
    answer = http.request(method, path)
    error = answer.json()["error"]
    assert answer.status_code == status and set(answer.json()) == {"error"} and set(error) == SHAPE
    assert error["code"] == code and error["type"] == "invalid_request_error" and path in error["message"]
    if status == 405:
        assert answer.headers["allow"] == routes.SERVED[path]


def test_the_official_client_reads_a_404_as_not_found(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.embeddings.create(model="smollm2-135m", input="hi")
    assert caught.value.body["code"] == "unknown_url"


@pytest.fixture
def long_work_holds_the_slot():
    """A Long context run of another tab holds the slot, its pieces timed at 300 s."""
    measure = Holder("a Long context run", owner="another-tab", yields=True)
    measure.pieces_s.append(300.0)
    runner.GENERATION_LOCK.acquire(measure)
    yield
    runner.GENERATION_LOCK.release()


def test_a_wait_past_the_limit_is_429_with_retry_after(monkeypatch, http, client, long_work_holds_the_slot):
    monkeypatch.setattr(routes, "preflight", lambda parsed: None)  # no model needed: refused before it runs
    monkeypatch.setenv("PLAYGROUND_API_MAX_WAIT_SECONDS", "20")
    answer = http.post("/v1/completions", json={"model": "smollm2-135m", "prompt": "hi", "max_tokens": 2})
    error = answer.json()["error"]
    assert answer.status_code == 429 and set(error) == SHAPE
    assert error["code"] == "wait_too_long" and error["type"] == "rate_limit_error"
    assert 290 <= int(answer.headers["retry-after"]) <= 300
    assert "waiting for a Long context run in another tab: about" in error["message"]
    assert "limit of 20 s (PLAYGROUND_API_MAX_WAIT_SECONDS)" in error["message"]
    with pytest.raises(openai.RateLimitError) as caught:  # streamed too, before its first line
        client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "hi"}],
                                       stream=True)
    assert caught.value.response.headers["retry-after"] == answer.headers["retry-after"]


def test_a_wait_within_the_limit_is_let_through(monkeypatch, long_work_holds_the_slot):
    """Admitted (the run then waits for the slot): nothing refuses it at the door."""
    from playground.openai_api.admission import Admission

    monkeypatch.setenv("PLAYGROUND_API_MAX_WAIT_SECONDS", "600")
    admission = Admission()
    with admission.admitted():
        assert admission.in_flight() == 1


def test_a_malformed_limit_is_one_line(monkeypatch):
    from playground.errors import PlaygroundError
    from playground.limits import api_max_wait_seconds

    monkeypatch.setenv("PLAYGROUND_API_MAX_WAIT_SECONDS", "soon")
    with pytest.raises(PlaygroundError, match="PLAYGROUND_API_MAX_WAIT_SECONDS='soon' is not a non-negative number"):
        api_max_wait_seconds()

"""The OpenAI-compatible API, through the official `openai` client, against the page's own server started in this
process on a free loopback port, with a tiny random-weight model from a local folder."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import httpx
import openai
import pytest
import torch

from playground import runner
from playground.events import DoneEvent
from playground.models import catalog
from playground.spec import RunSpec
from playground.tools.serve import HOST, free_port
from tests.helpers import module_tiny_model, save_tiny_model

CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")
PROMPT = "The cat sat on"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    with module_tiny_model(tmp_path_factory) as path:
        yield path


@pytest.fixture(scope="module")
def chat_model(model):
    """A tiny model with a chat template, beside the first one (where local models may load from)."""
    return save_tiny_model(Path(model).parent / "tiny-chat", seed=1, chat_template=CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def base_url(model):
    from playground.ui import serving

    demo = serving.build_app()
    port = free_port()
    serving.launch(demo, HOST, port, block=False)
    yield f"http://{HOST}:{port}/v1"
    demo.close()


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)


def reference(prompt: str, history: list[tuple[str, str]] | None = None, **spec) -> dict:
    """What the runner returns for the same run, outside the server."""
    events = runner.run(prompt, RunSpec(**spec), history=history)
    return next(event.result for event in events if isinstance(event, DoneEvent))


def test_models_lists_the_installed_bundled_models(client):
    listed = [m.id for m in client.models.list().data]
    assert listed == [row["name"] for row in catalog.list_models() if row["installed"]]


def test_greedy_completion_is_the_runners_and_its_logprobs_are_p_model(client, model):
    done = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3)
    result = reference(PROMPT, model=model, max_new_tokens=8, chat=False)
    choice = done.choices[0]
    assert choice.text == result["text"] and choice.finish_reason == "length"
    # the records' own logs of the unrounded p_model: equal to ln(p_model) within p's 5-place rounding
    assert choice.logprobs.token_logprobs == [t["logprob_model"] for t in result["tokens"]]
    assert choice.logprobs.token_logprobs == pytest.approx([math.log(t["p_model"]) for t in result["tokens"]],
                                                           rel=1e-3, abs=1e-4)
    assert choice.logprobs.tokens == [t["text"] for t in result["tokens"]]
    assert done.usage.completion_tokens == 8 and done.usage.prompt_tokens == result["prompt_tokens"]
    assert done.model_extra["metrics"][0]["tokens_per_s"] > 0 and done.model_extra["metrics"][0]["backend"] == "torch"


def test_processed_logprobs_are_the_drawn_distributions(client, model):
    # both cold (reuse off): a warm run's probabilities may differ from a cold one's in the last printed digit
    asked = dict(model=model, prompt=PROMPT, max_tokens=6, temperature=0.5, seed=3, logprobs=2)
    raw = client.completions.create(**asked, extra_body={"reuse": False}).choices[0].logprobs
    processed = client.completions.create(**asked, extra_body={"logprobs_mode": "processed", "reuse": False}
                                          ).choices[0].logprobs
    result = reference(PROMPT, model=model, max_new_tokens=6, strategy="sampling", temperature=0.5, top_k=0, seed=3,
                       chat=False)
    assert raw.token_logprobs == [t["logprob_model"] for t in result["tokens"]]
    assert processed.token_logprobs == [t["logprob"] for t in result["tokens"]]
    # at temperature 0.5 the drawn distribution is sharper than the model's: its best alternative is likelier
    assert all(max(p.values()) > max(r.values()) for p, r in zip(processed.top_logprobs, raw.top_logprobs,
                                                                   strict=True))


def test_echo_scores_every_prompt_token_after_the_first(client, model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    done = client.completions.create(model=model, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1)
    logprobs = done.choices[0].logprobs
    ids = AutoTokenizer.from_pretrained(model)(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        expected = torch.log_softmax(AutoModelForCausalLM.from_pretrained(model)(ids).logits[0, :-1], -1)
    expected = expected.gather(1, ids[0, 1:, None])[:, 0].tolist()
    assert done.choices[0].text == PROMPT and "".join(logprobs.tokens) == PROMPT
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert logprobs.token_logprobs[1:] == pytest.approx(expected, abs=1e-4)
    assert done.usage.completion_tokens == 0


def test_echo_with_generation_gives_the_prompt_then_the_completion(client, model):
    done = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0, echo=True, logprobs=0)
    plain = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=0)
    logprobs = done.choices[0].logprobs
    assert done.choices[0].text == PROMPT + plain.choices[0].text
    assert logprobs.token_logprobs[len(PROMPT):] == plain.choices[0].logprobs.token_logprobs
    assert logprobs.text_offset == list(range(len(PROMPT) + 4))  # one byte per token


def test_n_seeded_samples_repeat_and_each_is_its_seeds_run(client, model):
    asked = dict(model=model, prompt=[PROMPT, "Once"], max_tokens=6, n=3, seed=11)
    first = [c.text for c in client.completions.create(**asked).choices]
    again = [c.text for c in client.completions.create(**asked).choices]
    assert first == again and len(set(first[:3])) == 3
    alone = client.completions.create(model=model, prompt="Once", max_tokens=6, seed=12).choices[0].text
    assert first[4] == alone  # choice 1 of the second prompt: seed 11 + 1


def test_streamed_text_adds_up_to_the_whole_response(client, model):
    asked = dict(model=model, prompt=PROMPT, max_tokens=10, temperature=0)
    whole = client.completions.create(**asked)
    chunks = list(client.completions.create(**asked, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def test_chat_applies_the_template_and_gives_top_logprobs(client, chat_model):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                {"role": "user", "content": "and?"}]
    done = client.chat.completions.create(model=chat_model, messages=messages, max_tokens=6, temperature=0,
                                          logprobs=True, top_logprobs=3)
    result = reference("and?", [("hi", "yo")], model=chat_model, max_new_tokens=6, chat=True)
    assert done.choices[0].message.content == result["text"] and done.choices[0].message.role == "assistant"
    assert done.usage.prompt_tokens == len("<user>hi\n<assistant>yo\n<user>and?\n<assistant>")
    for entry in done.choices[0].logprobs.content:
        assert len(entry.top_logprobs) == 3 and entry.top_logprobs[0].logprob == entry.logprob  # greedy: the best
        assert entry.bytes == list(entry.token.encode())
    streamed = client.chat.completions.create(model=chat_model, messages=messages, max_tokens=6, temperature=0,
                                              stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == result["text"]


def test_a_system_turn_goes_first_through_the_template_and_only_first(client, chat_model):
    asked = dict(model=chat_model, max_tokens=4, temperature=0)
    done = client.chat.completions.create(**asked, messages=[{"role": "system", "content": "be brief"},
                                                             {"role": "user", "content": "and?"}])
    assert done.usage.prompt_tokens == len("<system>be brief\n<user>and?\n<assistant>")  # one byte per token
    plain = client.chat.completions.create(**asked, messages=[{"role": "user", "content": "and?"}])
    assert done.usage.prompt_tokens > plain.usage.prompt_tokens
    for messages, words in (([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}],
                             "messages[1].role is 'system'"),
                            ([{"role": "developer", "content": "b"}], "messages hold only a system turn")):
        with pytest.raises(openai.BadRequestError, match=re.escape(words)):
            client.chat.completions.create(**asked, messages=messages)


def test_more_than_five_alternatives_are_the_models_own_over_prompt_and_output(client, chat_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    done = client.chat.completions.create(model=chat_model, messages=[{"role": "user", "content": "and?"}],
                                          max_tokens=4, temperature=0, logprobs=True, top_logprobs=12)
    generated = reference("and?", model=chat_model, max_new_tokens=4, chat=True)["token_ids"]
    prompt = AutoTokenizer.from_pretrained(chat_model)("<user>and?\n<assistant>", add_special_tokens=False).input_ids
    ids = torch.tensor([prompt + generated])
    with torch.inference_mode():
        logits = AutoModelForCausalLM.from_pretrained(chat_model)(ids).logits[0, len(prompt) - 1:-1]
    best = torch.topk(torch.log_softmax(logits, -1), 12).values.tolist()
    content = done.choices[0].logprobs.content
    assert [[a.logprob for a in entry.top_logprobs] for entry in content] == [pytest.approx(row, abs=1e-4)
                                                                              for row in best]


def test_a_json_schema_response_format_gives_valid_json(client, model):
    # without flexible whitespace, as a random model would otherwise spend its tokens on it
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False, "x-guidance": {"whitespace_flexible": False}}
    done = client.completions.create(model=model, prompt=PROMPT, max_tokens=24, temperature=0,
                                     extra_body={"response_format": {"type": "json_schema",
                                                                     "json_schema": {"name": "x", "schema": schema}}})
    assert set(json.loads(done.choices[0].text)) == {"ok"}


def test_knobs_ride_in_the_extra_body(client, model):
    jax = client.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=0,
                                    extra_body={"backend": "jax", "cache": "sink", "window": 8, "sink_tokens": 2})
    expected = reference(PROMPT, model=model, max_new_tokens=6, backend="jax", cache="sink", window=8, sink_tokens=2,
                         chat=False)
    assert jax.choices[0].text == expected["text"]
    assert {k: jax.model_extra["metrics"][0][k] for k in ("backend", "cache")} == {"backend": "jax", "cache": "sink"}
    beams = client.completions.create(model=model, prompt=PROMPT, max_tokens=6, n=2,
                                      extra_body={"strategy": "beam", "num_beams": 3})
    searched = reference(PROMPT, model=model, max_new_tokens=6, strategy="beam", num_beams=3, num_return_sequences=2,
                         chat=False)
    assert [c.text for c in beams.choices] == searched["sequences"] and [c.index for c in beams.choices] == [0, 1]


def test_a_stop_string_ends_the_text_before_it(client, model):
    whole = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0).choices[0].text
    stop = whole[5:7]
    cut = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].text == whole[:whole.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0, stop=stop,
                                         stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == cut.choices[0].text


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"top_p": 0}, "top_p", "top_p=0.0 is out of range; allowed: (0.0, 1.0]"),
    ({"n": 2, "temperature": 0}, "n", "n=2 needs a strategy that samples"),
    ({"logprobs": 21}, "logprobs", "logprobs=21 is out of range; allowed: whole numbers from 0 to 20"),
    ({"logprobs": 6, "logprobs_mode": "processed"}, "logprobs", "the token records keep 5 alternatives"),
    ({"max_tokens": 0}, "max_tokens", "max_tokens=0 generates nothing"),
    ({"cache": "paged"}, "cache", "cache 'paged' is not one of"),
    ({"suffix": "x"}, "suffix", "unknown field(s) suffix"),
    ({"prompt": [1, 2]}, "prompt", "prompt must be a string or a non-empty list of strings"),
])
def test_bad_values_are_400_in_openais_shape_with_the_clis_words(client, model, body, param, words):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=model, prompt=PROMPT, max_tokens=4, extra_body=body)  # body's fields win
    error = caught.value.body
    assert words in error["message"] and error["param"] == param and error["type"] == "invalid_request_error"


def test_an_unknown_model_is_404_and_broken_bodies_are_400(base_url, client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="nope", prompt=PROMPT, max_tokens=4)
    assert caught.value.body["code"] == "model_not_found" and "unknown model 'nope'" in caught.value.body["message"]
    for raw in (b"{not json", b"[1, 2]", b'{"model": "smollm2-135m", "messages": "hi"}'):
        answer = httpx.post(f"{base_url}/chat/completions", content=raw, headers={"content-type": "application/json"})
        assert answer.status_code == 400 and set(answer.json()["error"]) == {"message", "type", "param", "code"}


def test_the_key_keeps_others_out_of_the_api_only(monkeypatch, base_url, client, model):
    monkeypatch.setenv("PLAYGROUND_API_KEY", "sesame")
    with pytest.raises(openai.AuthenticationError):
        client.models.list()
    keyed = openai.OpenAI(base_url=base_url, api_key="sesame", max_retries=0)
    assert keyed.completions.create(model=model, prompt=PROMPT, max_tokens=2, temperature=0).choices[0].text
    assert httpx.get(base_url.removesuffix("v1")).status_code == 200  # the page stays open


def test_a_full_queue_is_429_with_retry_after(monkeypatch, base_url, model):
    monkeypatch.setenv("PLAYGROUND_QUEUE_SIZE", "0")
    answer = httpx.post(f"{base_url}/completions", json={"model": model, "prompt": PROMPT, "max_tokens": 2})
    assert answer.status_code == 429 and int(answer.headers["retry-after"]) >= 1
    assert answer.json()["error"]["code"] == "queue_full"


def test_logit_bias_steers_the_tokens_and_names_a_token_outside_the_vocabulary(client, model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    forced = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0,
                                       logit_bias={"65": 100})
    assert forced.choices[0].text == tokenizer.decode([65]) * 4
    first = reference(PROMPT, model=model, max_new_tokens=1, chat=False)["token_ids"][0]
    without = reference(PROMPT, model=model, max_new_tokens=3, chat=False, logit_bias=json.dumps({first: -100}))
    banned = client.completions.create(model=model, prompt=PROMPT, max_tokens=3, temperature=0,
                                       logit_bias={str(first): -100})
    assert without["token_ids"][0] != first and banned.choices[0].text == without["text"]
    with pytest.raises(openai.BadRequestError, match="logit_bias token 9999 is outside"):
        client.completions.create(model=model, prompt=PROMPT, max_tokens=1, logit_bias={"9999": 1})


def test_a_client_that_goes_away_stops_its_run(base_url, client, model):
    """Left mid-run, a run of 1024 tokens frees the generation slot sooner than a whole run of 256 takes."""
    import socket
    import time
    from urllib.parse import urlparse

    def body(tokens: int) -> dict:  # min_tokens: no end-of-text token ends the run early
        return {"model": model, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "min_tokens": tokens}

    began = time.monotonic()
    httpx.post(f"{base_url}/completions", json=body(256), timeout=600).raise_for_status()
    whole_s = time.monotonic() - began

    def freed_after(leave) -> float:
        """Seconds from the client leaving until the generation slot is free again."""
        leave()
        left = time.monotonic()
        while runner.GENERATION_LOCK.locked():
            time.sleep(0.01)
        return time.monotonic() - left

    def hang_up() -> None:  # a whole (non-streamed) request whose connection closes once its run generates
        address = urlparse(base_url)
        payload = json.dumps(body(1024)).encode()
        with socket.create_connection((address.hostname, address.port)) as connection:
            connection.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))
            while not runner.GENERATION_LOCK.locked():
                time.sleep(0.01)

    def close_stream() -> None:
        stream = client.completions.create(model=model, prompt=PROMPT, max_tokens=1024, temperature=0,
                                           extra_body={"min_tokens": 1024}, stream=True)
        next(iter(stream))
        assert runner.GENERATION_LOCK.locked()  # the first chunk came while the run was generating
        stream.close()

    for leave in (hang_up, close_stream):
        assert freed_after(leave) < whole_s


def test_a_shared_prompt_is_reused_within_a_cache_salt_and_never_across_salts(client, model):
    system = "You are a careful assistant. Answer in one short sentence, and never more. " * 2
    asked = dict(model=model, max_tokens=4, temperature=0)
    cold = client.completions.create(**asked, prompt=system + "Q1", extra_body={"cache_salt": "tenant-a"})
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    warm = client.completions.create(**asked, prompt=system + "Q2", extra_body={"cache_salt": "tenant-a"})
    assert warm.usage.prompt_tokens_details.cached_tokens == len(system) + 1  # "Q" too: one byte per token
    other = client.completions.create(**asked, prompt=system + "Q2", extra_body={"cache_salt": "tenant-b"})
    assert other.usage.prompt_tokens_details.cached_tokens == 0
    assert other.choices[0].text == warm.choices[0].text  # the warm run gives the cold text
    streamed = list(client.completions.create(**asked, prompt=system + "Q3", stream=True,
                                              stream_options={"include_usage": True},
                                              extra_body={"cache_salt": "tenant-b"}))
    assert streamed[-1].usage.prompt_tokens_details.cached_tokens == len(system) + 1


def test_a_cache_salt_that_is_not_a_string_is_a_400(client, model):
    with pytest.raises(openai.BadRequestError, match="cache_salt must be a string") as caught:
        client.completions.create(model=model, prompt=PROMPT, max_tokens=2, extra_body={"cache_salt": 7})
    assert caught.value.body["param"] == "cache_salt"

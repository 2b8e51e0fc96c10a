"""The OpenAI-compatible API on the bundled SmolLM2, served by `python -m playground serve`, through the official
`openai` client: greedy output and its logprobs are the CLI's run, and echo ranks a true sentence above a wrong one."""

from __future__ import annotations

import json

import openai
import pytest

from playground.tools.serve import serve_app
from tests.helpers import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]  # the served app and the CLI: fresh Pythons

MODEL = "smollm2-135m"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def client():
    with serve_app(env={"HF_HUB_OFFLINE": "1", "PLAYGROUND_WARMUP": "0"}, timeout_s=180,
                   command=("-m", "playground", "serve")) as app:
        yield openai.OpenAI(base_url=f"{app.url}v1", api_key="unused", max_retries=0, timeout=300)


def test_greedy_completion_and_its_logprobs_are_the_clis_run(client):
    done = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0, logprobs=1)
    cli = run_cli("run", "--model", MODEL, "--prompt", PROMPT, "--max-new-tokens", "16", "--no-chat", "--json",
                  env=None, timeout=600)
    assert cli.returncode == 0, cli.stderr
    result = json.loads(cli.stdout)
    assert done.choices[0].text == result["text"]
    assert done.choices[0].logprobs.token_logprobs == [t["logprob_model"] for t in result["tokens"]]


def test_echo_ranks_the_true_sentence_above_a_wrong_one(client):
    def likelihood(text: str) -> float:
        done = client.completions.create(model=MODEL, prompt=text, max_tokens=0, echo=True, logprobs=0)
        logprobs = done.choices[0].logprobs.token_logprobs
        assert logprobs[0] is None and done.choices[0].text == text
        return sum(logprobs[1:])

    assert likelihood(f"{PROMPT} Paris.") > likelihood(f"{PROMPT} a banana.") + 5

"""The served app with PLAYGROUND_WARMUP=default: the default model loads and the JAX decoder compiles in the
background, so the first JAX request after it compiles nothing and moves no weights."""

import time

import pytest

from playground.tools.serve import serve_app

pytestmark = pytest.mark.slow


def test_after_the_warm_up_a_default_jax_request_compiles_nothing():
    from gradio_client import Client

    with serve_app(env={"HF_HUB_OFFLINE": "1", "PLAYGROUND_WARMUP": "default"}) as app:
        client = Client(app.url, verbose=False)
        deadline = time.monotonic() + 600
        status = client.predict(api_name="/warmup")
        while status["phase"] == "running" and time.monotonic() < deadline:
            time.sleep(1)
            status = client.predict(api_name="/warmup")
        assert status["phase"] == "done", status
        result = client.predict("What is the capital of France?",
                                '{"backend": "jax", "cache": "static"}', api_name="/run")
    assert result["metrics"]["compile_s"] == 0.0 and result["metrics"]["load_s"] < 0.5
    assert result["extra"]["weights_moved_s"] == 0.0
    assert "Paris" in result["text"]

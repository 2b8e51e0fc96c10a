"""Hostile input and faults on a tiny model: random specs and prompts, remote code, cancellation, time limits."""

import json
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from playground import runner
from playground.errors import PlaygroundError
from playground.events import TextEvent
from playground.models import loaded
from playground.spec import RunSpec
from tests.helpers import save_tiny_model

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6)
spec_keys = st.sampled_from([f for f in RunSpec.__dataclass_fields__] + ["bogus", ""])
random_specs = st.dictionaries(spec_keys, json_values, max_size=6)
prompts = st.text(max_size=200) | st.just("") | st.just("\x00\x1b[31m\u202e") | st.just("x" * 5000)


@pytest.fixture(scope="module")
def local_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    save_tiny_model(root / "tiny")
    return root


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=random_specs | json_values)
def test_random_specs_either_validate_or_raise_a_playground_error(data):
    try:
        spec = RunSpec.from_json(json.dumps(data, allow_nan=True))
    except PlaygroundError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert isinstance(spec, RunSpec)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=prompts, data=random_specs)
def test_random_requests_run_or_are_refused_cleanly(local_model, monkeypatch, prompt, data):
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(local_model))
    data = {**data, "model": str(local_model / "tiny")}
    data = {k: v for k, v in data.items() if k not in ("max_new_tokens", "num_beams", "assistant")}
    try:
        spec = RunSpec.from_dict({**data, "max_new_tokens": 3})
        result = runner.run_to_result(prompt, spec)
    except PlaygroundError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert 1 <= result["new_tokens"] <= 3


def test_remote_code_is_never_trusted(tmp_path, monkeypatch):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    seen = []
    for cls in (AutoConfig, AutoModelForCausalLM, AutoTokenizer):
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _original=original, **kwargs):
            seen.append(kwargs.get("trust_remote_code"))
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    save_tiny_model(tmp_path / "m")
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    loaded.ModelLRU(1).get(str(tmp_path / "m"))
    assert len(seen) >= 3 and all(flag is False for flag in seen)  # ours and transformers' nested calls


def test_closing_the_event_stream_cancels_generation_and_frees_the_slot(local_model, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(local_model))
    spec = RunSpec(model=str(local_model / "tiny"), max_new_tokens=1000)
    stream = runner.run("abc", spec)
    for event in stream:
        if isinstance(event, TextEvent) and event.new_tokens >= 3:
            break
    stream.close()  # what Gradio does when the tab closes or stop is pressed
    def busy() -> bool:
        workers = [t for t in threading.enumerate() if t.name.startswith("run-") and t.is_alive()]
        return runner.GENERATION_LOCK.locked() or bool(workers)

    deadline = time.monotonic() + 10  # a 1000-token run would take far longer; stopping takes one step
    while busy() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not busy()


def test_wall_time_limit_stops_a_run(local_model, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(local_model))
    monkeypatch.setenv("PLAYGROUND_MAX_REQUEST_SECONDS", "0.3")
    result = runner.run_to_result("abc", RunSpec(model=str(local_model / "tiny"), max_new_tokens=1000))
    assert result["stopped"] and result["new_tokens"] < 1000

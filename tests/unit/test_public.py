"""A public deployment is not a free model download service: an allow-list refused before any network access,
and weight sizes checked from the hub's metadata before anything is downloaded. Locally nothing changes."""

import os
import socket
from types import SimpleNamespace

import pytest

from playground import limits, runner
from playground.errors import PlaygroundError
from playground.models import catalog, loaded, public
from playground.spec import RunSpec
from tests.helpers import run_cli


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture
def on_a_space(monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/decoding-playground")
    monkeypatch.delenv("PLAYGROUND_PUBLIC", raising=False)
    monkeypatch.delenv("PLAYGROUND_ALLOWED_MODELS", raising=False)


@pytest.mark.parametrize(("space_id", "flag", "expected"), [
    (None, None, False), ("a/b", None, True), (None, "1", True), ("a/b", "0", False), (None, "true", True)])
def test_public_means_a_space_or_the_flag(monkeypatch, space_id, flag, expected):
    for name, value in (("SPACE_ID", space_id), ("PLAYGROUND_PUBLIC", flag)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert limits.is_public() is expected


def test_the_default_allow_list_holds_the_bundled_sources_and_small_instruct_models(on_a_space):
    allowed = catalog.allowed_hub_models()
    assert allowed[0] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert set(public.EXTRA_ALLOWED) <= set(allowed)
    assert catalog.model_choices() == ["smollm2-135m", "gemma3-270m", *allowed]


@pytest.mark.parametrize("name", ["someone/huge-model-70b", "Qwen/Qwen2.5-72B-Instruct"])
def test_a_hub_id_off_the_list_is_refused_before_any_network_access(on_a_space, no_network, name):
    with pytest.raises(PlaygroundError, match=rf"model '{name}' is not served by this public deployment; pick"):
        runner.run_to_result("hi", RunSpec(model=name))
    with pytest.raises(PlaygroundError, match="is not served by this public deployment"):  # as a draft model too
        runner.run_to_result("hi", RunSpec(strategy="assisted", assistant=name))


def test_the_allow_list_is_configurable_and_case_insensitive(on_a_space, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_ALLOWED_MODELS", "org/one, org/Two")
    assert catalog.allowed_hub_models() == ("org/one", "org/Two")
    public.check_allowed("ORG/two", "hub")
    with pytest.raises(PlaygroundError, match="pick a bundled model or one of: org/one, org/Two"):
        public.check_allowed("HuggingFaceTB/SmolLM2-135M-Instruct", "hub")


def test_local_directories_are_refused_in_public(on_a_space, tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    with pytest.raises(PlaygroundError, match="local model directories are not served"):
        catalog.check_available(str(tmp_path / "m"))


def test_locally_any_hub_id_is_still_allowed(monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("PLAYGROUND_PUBLIC", raising=False)
    public.check_allowed("someone/huge-model-70b", "hub")
    assert catalog.model_choices() == ["smollm2-135m", "gemma3-270m"]


class Downloads:
    """Records every call that could fetch a file of a model, and refuses it."""

    def __init__(self, monkeypatch):
        import huggingface_hub
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        self.calls: list[str] = []
        for owner, name in ((huggingface_hub, "hf_hub_download"), (huggingface_hub, "snapshot_download"),
                            (AutoConfig, "from_pretrained"), (AutoTokenizer, "from_pretrained"),
                            (AutoModelForCausalLM, "from_pretrained")):
            monkeypatch.setattr(owner, name, self._record(f"{getattr(owner, '__name__', owner)}.{name}"))

    def _record(self, what):
        def call(*args, **kwargs):
            self.calls.append(what)
            raise OSError(f"{what} is not allowed in this test")

        return call


def fake_hub(monkeypatch, parameters: int | None = None, files: dict[str, int] | None = None):
    """The hub's metadata for any model: a parameter count (safetensors index) or a list of files and sizes."""
    import huggingface_hub

    asked = []

    def model_info(self, repo_id, **kwargs):
        asked.append((repo_id, kwargs.get("files_metadata")))
        safetensors = SimpleNamespace(total=parameters) if parameters else None
        siblings = [SimpleNamespace(rfilename=n, size=s) for n, s in (files or {}).items()]
        return SimpleNamespace(safetensors=safetensors, siblings=siblings)

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(catalog, "hub_reachable", lambda timeout_s=3.0: True)
    monkeypatch.setattr(loaded, "hub_reachable", lambda timeout_s=3.0: True)
    return asked


@pytest.fixture
def allowed_big_model(on_a_space, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_ALLOWED_MODELS", "org/big,org/small")
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", "2G")
    loaded.LOADED.clear()
    yield
    loaded.LOADED.clear()


def test_an_allowed_model_too_large_for_the_budget_is_refused_before_any_download(allowed_big_model, monkeypatch):
    downloads = Downloads(monkeypatch)
    asked = fake_hub(monkeypatch, parameters=7_000_000_000)
    with pytest.raises(PlaygroundError, match=r"model org/big \(fp32\) needs about 26.08 GiB but only 2.00 GiB"):
        runner.run_to_result("hi", RunSpec(model="org/big"))
    assert asked == [("org/big", True)] and downloads.calls == []
    with pytest.raises(PlaygroundError, match=r"model org/big \(nf4\) needs about 3.26 GiB"):
        runner.run_to_result("hi", RunSpec(model="org/big", weights="nf4"))  # at the chosen precision
    assert downloads.calls == []


def test_without_a_parameter_count_the_weight_files_sizes_are_checked(allowed_big_model, monkeypatch):
    downloads = Downloads(monkeypatch)
    fake_hub(monkeypatch, files={"model.safetensors": 3 * 2**30, "pytorch_model.bin": 3 * 2**30, "config.json": 700})
    with pytest.raises(PlaygroundError, match=r"model org/big \(fp32\) needs about 3.00 GiB"):
        runner.run_to_result("hi", RunSpec(model="org/big"))
    assert downloads.calls == []


def test_a_model_within_the_budget_goes_on_to_load(allowed_big_model, monkeypatch):
    downloads = Downloads(monkeypatch)
    asked = fake_hub(monkeypatch, parameters=135_000_000)
    with pytest.raises(PlaygroundError, match="could not load model 'org/small'"):  # our fake download refuses
        runner.run_to_result("hi", RunSpec(model="org/small"))
    assert asked == [("org/small", True)] and downloads.calls == ["AutoConfig.from_pretrained"]


def test_metadata_the_hub_will_not_give_is_a_refusal(allowed_big_model, monkeypatch):
    import huggingface_hub

    def gated(self, repo_id, **kwargs):
        raise RuntimeError("401 Client Error: this repository is gated")

    Downloads(monkeypatch)
    fake_hub(monkeypatch)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", gated)
    with pytest.raises(PlaygroundError, match=r"could not read 'org/big''s size from the hub \(401 Client Error"):
        runner.run_to_result("hi", RunSpec(model="org/big"))


@pytest.mark.subprocess
def test_the_cli_lists_what_a_public_deployment_serves():
    env = {**os.environ, "PLAYGROUND_PUBLIC": "1", "PLAYGROUND_ALLOWED_MODELS": "org/one,org/two"}
    out = run_cli("models", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "public deployment: also org/one, org/two (PLAYGROUND_ALLOWED_MODELS)"

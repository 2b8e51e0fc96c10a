"""torch.compile as the PyTorch path's third engine, on a tiny model: eager's tokens, the compile reported apart
from TTFT, no compile on a repeated request, and the settings it refuses (with why) before anything loads."""

from __future__ import annotations

import pytest

from playground import runner
from playground.backends.torch import compiled
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from tests.helpers import allowed_tiny_model


@pytest.fixture
def local_model(tmp_path, monkeypatch):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        yield path


def dynamo_counts() -> dict[str, dict[str, int]]:
    """A copy of dynamo's counters: frames it was handed, graphs it compiled."""
    from torch._dynamo.utils import counters

    return {name: dict(counter) for name, counter in counters.items()}


@pytest.mark.slow  # inductor's compile: the fast lane checks that a compiled column asks generate to compile
def test_a_compiled_column_gives_eager_tokens_compiles_apart_and_once(local_model):
    """The one test here that compiles (a tiny Llama's decode step: a few seconds, more when inductor starts).
    torchax is loaded, as it is once a JAX column has run: it poses as torch's accelerator, which dynamo asks
    for a stream as it starts tracing (compiled.torchax_out_of_sight)."""
    import torchax  # noqa: F401

    base = RunSpec(model=local_model, cache="static", max_new_tokens=24)
    eager = runner.run_to_result("héllo wörld", base)
    compiled._COMPILED_SINCE_RESET[0] = 10**6  # as if past dynamo's limit: the warm-up clears its caches first
    first = runner.run_to_result("héllo wörld", base.replace(torch_compile="default"))
    assert first["token_ids"] == eager["token_ids"] and first["forward_passes"] == eager["forward_passes"]
    assert compiled._COMPILED_SINCE_RESET[0] >= 1  # counted afresh from the reset
    metrics = first["metrics"]
    assert metrics["compile_s"] > 0 and metrics["ttft_s"] < metrics["compile_s"]  # the compile is not TTFT's
    assert metrics["total_s"] >= metrics["compile_s"]
    assert first["extra"]["torch_compile"] == {"mode": "default", "graphs_compiled_in_run": 0}
    assert first["spec"]["torch_compile"] == "default"

    before = dynamo_counts()
    again = runner.run_to_result("hällo welt!", base.replace(torch_compile="default"))  # the same cache length
    assert dynamo_counts()["stats"] == before["stats"]  # dynamo compiled no graph for it
    assert again["metrics"]["compile_s"] == 0
    assert again["token_ids"] == runner.run_to_result("hällo welt!", base)["token_ids"]

    sampled = base.replace(strategy="sampling", top_k=20, seed=3)
    assert (runner.run_to_result("héllo wörld", sampled.replace(torch_compile="default"))["token_ids"]
            == runner.run_to_result("héllo wörld", sampled)["token_ids"])
    assert dynamo_counts()["stats"] == before["stats"]


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"backend": "jax"}, "torch.compile is PyTorch's compiler, for backend 'torch'"),
    ({"cache": "dynamic"}, "torch.compile needs the static cache's fixed shapes"),
    ({"cache": "sliding"}, "use cache 'static'"),
    ({"strategy": "beam", "num_beams": 2}, "strategy 'beam' calls the model eager"),
    ({"strategy": "assisted", "prompt_lookup": 4}, "use strategy 'greedy' or 'sampling'"),
    ({"weights": "int8"}, "transformers compiles no bitsandbytes-quantized model (int8 weights)"),
])
def test_what_transformers_would_not_compile_is_refused_with_the_reason(changes, fragment):
    with pytest.raises(PlaygroundError) as refused:
        RunSpec.from_dict({"cache": "static", "torch_compile": "default", **changes})
    assert str(refused.value).startswith("torch_compile='default' cannot run: ") and fragment in str(refused.value)
    RunSpec.from_dict({"cache": "static", **changes, "torch_compile": "off"})  # eager runs them all


def test_an_unknown_mode_is_refused_naming_the_modes():
    with pytest.raises(PlaygroundError, match="torch_compile 'fast' is not one of: off, default, reduce-overhead"):
        RunSpec(cache="static", torch_compile="fast")


def test_a_cpu_without_a_cpp_compiler_refuses_before_anything_loads(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to run there
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(compiled, "on_cpu", lambda: True)
    spec = RunSpec(cache="static", torch_compile="default")
    with pytest.raises(PlaygroundError) as refused:
        runner.preflight(spec)
    assert str(refused.value) == (
        "torch_compile='default' cannot run: torch.compile on CPU needs a C++ compiler (inductor builds C++ "
        f"kernels); none found on PATH (looked for {', '.join(compiled.cpp_compilers())}; install one, or set "
        "CXX to the one you have)")
    runner.preflight(spec.replace(torch_compile="off"))  # eager needs none
    monkeypatch.setattr(compiled, "on_cpu", lambda: False)
    runner.preflight(spec)  # on a GPU inductor builds Triton kernels, not C++


def test_the_cache_under_torch_compile_is_rounded_up_so_nearby_requests_share_the_step(tiny):
    from playground.backends.torch.caches.factory import COMPILED_GRANULE, make_cache

    spec = RunSpec(cache="static", max_new_tokens=30)
    assert make_cache(spec, tiny.model, 10).get_max_length() == 40
    compiling = spec.replace(torch_compile="default")
    for prompt in (10, 20, 34):
        assert make_cache(compiling, tiny.model, prompt).get_max_length() == COMPILED_GRANULE
    assert make_cache(compiling, tiny.model, 35).get_max_length() == 2 * COMPILED_GRANULE


def test_eager_stays_eager_and_a_compiled_column_asks_generate_to_compile_on_any_device(tiny):
    from transformers import StaticCache

    from playground.backends.torch.config import generation_config

    cache = {"past_key_values": StaticCache(config=tiny.model.config, max_cache_len=32)}
    eager = generation_config(RunSpec(cache="static"), tiny.model)
    assert eager.disable_compile is True and not tiny.model._valid_auto_compile_criteria(cache, eager)
    config = generation_config(RunSpec(cache="static", torch_compile="max-autotune-no-cudagraphs"), tiny.model)
    assert config.disable_compile is False and tiny.model._valid_auto_compile_criteria(cache, config)  # on a CPU
    assert (config.compile_config.mode, config.compile_config.fullgraph) == ("max-autotune-no-cudagraphs", True)
    again = generation_config(RunSpec(cache="static", torch_compile="max-autotune-no-cudagraphs"), tiny.model)
    assert again.compile_config == config.compile_config  # so transformers keeps the model's compiled call


def test_the_page_shows_the_knob_on_pytorch_columns_only_and_names_the_engine():
    from playground.ui.columns import column_settings, control_values, notice_text, visibility
    from playground.ui.labels import base_label as label

    assert visibility("greedy", "static", "torch")["torch_compile"]
    assert not visibility("greedy", "static", "jax")["torch_compile"]
    values = control_values({"cache": "static"})
    assert values["torch_compile"] == "off" and "torch_compile" not in column_settings(values)  # eager: as before
    on = column_settings(values | {"torch_compile": "default"})
    assert on["torch_compile"] == "default" and notice_text(on) == ""
    assert control_values(on)["torch_compile"] == "default"  # a shared link sets the control again
    assert label(2, on) == "3: greedy · static · torch.compile"
    assert label(0, {**on, "torch_compile": "reduce-overhead"}) == "1: greedy · static · torch.compile reduce-overhead"
    assert "torch.compile needs the static cache's fixed shapes" in notice_text({**on, "cache": "dynamic"})
    hidden = column_settings(values | {"backend": "jax", "torch_compile": "default"})
    assert "torch_compile" not in hidden and notice_text(hidden) == ""  # a hidden knob cannot refuse a run


def test_a_forward_torch_compile_cannot_compile_is_refused_in_one_line(tiny, monkeypatch):
    import torch
    from torch._dynamo.exc import Unsupported

    def graph_break(*args):
        raise Unsupported("Graph break in a custom layer\n  Explanation: ...")

    monkeypatch.setattr(compiled, "_generate_warm_up", graph_break)
    with pytest.raises(PlaygroundError) as refused:
        compiled.warm_up(tiny, torch.tensor([[5, 6, 7]]), RunSpec(cache="static", torch_compile="default"))
    assert str(refused.value) == ("torch_compile='default' cannot run: torch.compile could not compile tiny-llama's "
                                  "decode step (Graph break in a custom layer); set torch_compile to 'off'")

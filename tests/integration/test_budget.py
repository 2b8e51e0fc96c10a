"""The memory budget on the bundled SmolLM2: a JAX run under a budget of 800M (plus its compiled programs' bound)
fits honestly, or is refused before it allocates; it is never admitted and then past the budget."""

import pytest

from playground import runner
from playground.backends.jax.engine.engine import engine_for
from playground.errors import PlaygroundError
from playground.models import loaded, memory
from playground.spec import RunSpec
from tests.helpers import new_device_bytes

pytestmark = pytest.mark.slow
PROMPT = "What is the capital of France?"
PROGRAMS = 32 * 2**20  # the engine's compiled programs: counted in the budget, so added to the 800M


@pytest.fixture
def budget_800m(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET", str(800 * 2**20 + PROGRAMS))
    monkeypatch.setenv("PLAYGROUND_PROGRAM_CACHE", str(PROGRAMS))
    loaded.LOADED.clear()
    yield memory.budget_bytes()
    loaded.LOADED.clear()


def test_a_jax_run_on_smollm2_fits_800m_with_its_engine_counted(budget_800m):
    spec = RunSpec(backend="jax", cache="static", max_new_tokens=64)
    result = runner.run_to_result(PROMPT, spec)
    model, _ = loaded.LOADED.get("smollm2-135m")
    engine, reused = engine_for(model.model, 1)
    device = new_device_bytes(engine, model.model)
    # 538 MB of fp32 weights + 279 MB of fused q/k/v and gate/up matrices (the rest shared through DLPack)
    assert reused and loaded.LOADED.resident_bytes() == model.weight_bytes + device + PROGRAMS
    assert 0 < device < 0.6 * model.weight_bytes
    assert loaded.LOADED.resident_bytes() + result["metrics"]["kv_cache_bytes"] <= budget_800m
    assert result["new_tokens"] > 0


def test_a_jax_run_whose_cache_would_pass_800m_is_refused_before_it_runs(budget_800m):
    runner.run_to_result(PROMPT, RunSpec(backend="jax", cache="static", max_new_tokens=8))
    with pytest.raises(PlaygroundError, match=r"the JAX static cache for .* needs about .* of the 832.0 MiB memory "
                                              r"budget is free; lower max_new_tokens"):
        runner.run_to_result(PROMPT, RunSpec(backend="jax", cache="static", max_new_tokens=600))
    # the same length in a bounded cache fits: a ring of 256 positions per layer
    sliding = RunSpec(backend="jax", cache="sliding", window=256, max_new_tokens=600)
    runner.check_cache_fits(loaded.LOADED.get("smollm2-135m")[0], sliding, 40)


def test_without_the_realignment_the_engine_would_copy_everything_and_is_refused(budget_800m, monkeypatch):
    monkeypatch.setattr(loaded, "_realign", lambda model: None)  # weights left at the safetensors file's offsets
    with pytest.raises(PlaygroundError, match=r"the JAX engine's weights on 1 device for smollm2-135m needs about "
                                              r"513.1 MiB .* use the torch backend"):
        runner.run_to_result(PROMPT, RunSpec(backend="jax", cache="static", max_new_tokens=8))
    assert runner.run_to_result(PROMPT, RunSpec(max_new_tokens=8))["new_tokens"] > 0  # the torch path still fits

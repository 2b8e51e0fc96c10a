"""Every strategy x cache x backend cell runs on the bundled models (none is refused: test_strategies checks the
table; a model-dependent refusal says why).

The full suite runs the grid's two axes on both backends: every cache under greedy decoding (the model's layers
beside each cache's layout; Gemma3's own sliding layers too) on both models, and every strategy on the dynamic
cache (the model's code under each strategy's programs) on SmolLM2. Each further crossing would compile programs
of its own (several seconds a cell, even at -O0) to show what the tiny models already show: each strategy's parity
over every cache is checked on tiny Llama and Gemma3 models, which run the same model code
(tests/unit/test_jax_*.py; beam search and assisted decoding over sliding layers too). The extended lane runs the
rest: every PyTorch cell, and Gemma3's strategies.
"""

import pytest

from playground import compatibility, registry, runner
from playground.errors import PlaygroundError
from playground.spec import RunSpec

pytestmark = pytest.mark.slow

MODELS = ["smollm2-135m", "gemma3-270m"]
CELLS = [(row["backend"], row["strategy"], cache) for row in compatibility.table() for cache in registry.cache_names()]
SUPPORTED = [cell for cell in CELLS if compatibility.refusal(*cell) is None]
GREEDY, DYNAMIC = "greedy", "dynamic"


def _on_an_axis(backend: str, strategy: str, cache: str) -> bool:
    """Greedy over every cache, or every strategy over the dynamic cache."""
    return strategy == GREEDY or cache == DYNAMIC


def _runs_on(backend: str, strategy: str, cache: str) -> bool:
    """Every PyTorch cell; on JAX, the two axes."""
    return backend == "torch" or _on_an_axis(backend, strategy, cache)


# model-dependent refusals (Gemma3 has its own sliding layers): (model, strategy or cache) -> what the refusal says
MODEL_REFUSALS = {("gemma3-270m", "sink"): "use cache 'sliding'",
                  ("gemma3-270m", "contrastive"): "contrastive search cannot run on model_type='gemma3_text'"}


def _in_the_full_suite(model: str, backend: str, strategy: str, cache: str) -> bool:
    """Each backend's two axes on SmolLM2; on Gemma3 its caches under greedy (its sliding layers beside each
    layout) and its refusals. The rest is extended: the PyTorch cells off the axes (transformers' own crossing,
    48 cells of about 11 CPU s) and Gemma3's strategies on the dynamic cache (a JAX cell compiles its own
    programs, 15-29 CPU s), since each strategy's parity over every cache is checked on tiny Llama and Gemma3
    models in the full suite."""
    if not _on_an_axis(backend, strategy, cache):
        return False
    return model == MODELS[0] or strategy == GREEDY or (model, strategy) in MODEL_REFUSALS


GRID = [pytest.param(model, *cell, id=f"{cell[0]}-{cell[1]}-{cell[2]}-{model}",
                     marks=[] if _in_the_full_suite(model, *cell) else [pytest.mark.extended])
        for model in MODELS for cell in SUPPORTED if _runs_on(*cell)]
STRATEGY_EXTRAS = {"assisted": {"prompt_lookup": 3}, "beam": {"num_beams": 2}, "contrastive": {"top_k": 4}}


# no parity is asserted, so the cells' programs compile at -O0, as the unit tests' do (a cell's run is mostly its
# compile)
@pytest.mark.usefixtures("tiny_programs_compile_at_o0")
@pytest.mark.parametrize(("model", "backend", "strategy", "cache"), GRID)
def test_supported_cell_runs(model, backend, strategy, cache):
    spec = RunSpec(model=model, backend=backend, strategy=strategy, cache=cache, max_new_tokens=6, chat=False,
                   window=16, **STRATEGY_EXTRAS.get(strategy, {}))
    refusal = MODEL_REFUSALS.get((model, cache)) or MODEL_REFUSALS.get((model, strategy))
    if refusal is not None:
        # docs/caches.md's note: attention sinks need an all-global RoPE model, and contrastive search crops its
        # cache at the end, which sliding layers past their window cannot
        with pytest.raises(PlaygroundError, match=refusal):
            runner.run_to_result("The capital of France is", spec)
        return
    result = runner.run_to_result("The capital of France is", spec)
    assert 1 <= result["new_tokens"] <= 6 and result["text"]
    assert result["metrics"]["kv_cache_bytes"] > 0


# the JAX path's draft of another tokenizer is extended here: tests/unit/test_jax_universal.py holds its parity on
# tiny models in every lane, and PyTorch's run below keeps the bundled pair
@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=pytest.mark.extended)])
def test_universal_assisted_decoding_gemma_with_smollm2_draft_equals_plain_greedy(backend):
    plain = runner.run_to_result("The capital of France is", RunSpec(model="gemma3-270m", max_new_tokens=20))
    assisted = runner.run_to_result("The capital of France is", RunSpec(
        model="gemma3-270m", strategy="assisted", assistant="smollm2-135m", max_new_tokens=20, backend=backend))
    assert assisted["token_ids"] == plain["token_ids"]
    assert 0.0 <= assisted["metrics"]["acceptance_rate"] <= 1.0
    assert assisted["forward_passes"] <= plain["forward_passes"]


@pytest.mark.parametrize(("model", "cache"), [
    ("smollm2-135m", {"cache": "static"}),
    ("smollm2-135m", {"cache": "sink", "window": 48, "sink_tokens": 4}),
    ("gemma3-270m", {"cache": "quantized", "cache_bits": 4, "residual_length": 16}),
])
def test_prompt_lookup_over_a_static_sink_or_quantized_cache_gives_plain_greedys_tokens(model, cache):
    """PyTorch rolls rejected drafts out of these caches exactly (the sink window and the quantized residual are
    crossed several times)."""
    prompt = "Repeat this line twice: the cat sat on the mat, the dog sat on the log."
    plain = runner.run_to_result(prompt, RunSpec(model=model, max_new_tokens=64, **cache))
    assisted = runner.run_to_result(prompt, RunSpec(model=model, strategy="assisted", prompt_lookup=4,
                                                    max_new_tokens=64, **cache))
    assert assisted["token_ids"] == plain["token_ids"]
    steps = assisted["assisted_steps"]
    assert sum(len(s["drafted"]) - s["accepted"] for s in steps) > 0  # some drafts were rejected, and undone
    assert assisted["forward_passes"] < plain["forward_passes"]

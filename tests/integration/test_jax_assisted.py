"""JAX assisted decoding on the bundled SmolLM2: prompt lookup on a grounded prompt keeps plain greedy's tokens."""

from __future__ import annotations

import pytest

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground.spec import RunSpec  # noqa: E402
from tests.helpers import jax_run  # noqa: E402


@pytest.mark.slow
@pytest.mark.extended  # test_presets' "Assisted on both backends" keeps plain greedy's tokens in fewer passes
def test_prompt_lookup_on_a_grounded_prompt_equals_plain_greedy():
    from playground.backends.jax.backend import JaxBackend
    from playground.models import loaded
    from playground.runner import encode_prompt
    from playground.tools.bench_assisted import GROUNDED_PROMPT

    model, _ = loaded.LOADED.get("smollm2-135m", "fp32")
    ids = encode_prompt(model, GROUNDED_PROMPT, None)
    plain = RunSpec(backend="jax", cache="static", max_new_tokens=96, min_new_tokens=96)
    expected, _ = jax_run(model, ids, plain)
    # the static cache (the dynamic cache's drafts: tiny models, and the bundled grid's prompt lookup cell)
    spec = plain.replace(strategy="assisted", prompt_lookup=10)
    out = JaxBackend().generate(model, ids, spec, lambda _: None, lambda: False)
    assert out.sequences[0] == expected.sequences[0]
    assert out.acceptance_rate > 0.5  # the passage is copied: most drafts are right
    assert out.forward_passes < len(out.sequences[0]) / 3


@pytest.mark.slow
# sliding in the full suite; the sink and quantized caches' rollback on SmolLM2 is extended, since each bounded
# and quantized cache's rollback is checked on tiny Llama and Gemma3 models in the full suite
# (tests/unit/test_jax_assisted.py)
@pytest.mark.parametrize("cache", [
    {"cache": "sliding", "window": 32},
    pytest.param({"cache": "sink", "window": 32, "sink_tokens": 4}, marks=pytest.mark.extended),
    pytest.param({"cache": "quantized", "cache_bits": 4, "residual_length": 16}, marks=pytest.mark.extended),
], ids=["sliding", "sink", "quantized"])
def test_prompt_lookup_over_a_bounded_or_quantized_cache_equals_plain_greedy_over_it(cache):
    """SmolLM2 on the grounded prompt: 96 new tokens cross the 32-token windows 3 times and flush the residual 6."""
    from playground.backends.jax.backend import JaxBackend
    from playground.models import loaded
    from playground.runner import encode_prompt
    from playground.tools.bench_assisted import GROUNDED_PROMPT

    model, _ = loaded.LOADED.get("smollm2-135m", "fp32")
    ids = encode_prompt(model, GROUNDED_PROMPT, None)
    plain = RunSpec(backend="jax", max_new_tokens=96, min_new_tokens=96, **cache)
    expected, _ = jax_run(model, ids, plain)
    out = JaxBackend().generate(model, ids, plain.replace(strategy="assisted", prompt_lookup=10),
                                lambda _: None, lambda: False)
    assert out.sequences[0] == expected.sequences[0]
    steps = out.assisted_steps
    assert sum(len(s["drafted"]) - s["accepted"] for s in steps) > 0  # rollback was exercised
    assert sum(s["accepted"] for s in steps) > 0 and out.forward_passes < len(out.sequences[0])


@pytest.mark.slow
@pytest.mark.extended  # a tiny Gemma3 model's drafts across its own window stay in the full suite (unit tests)
def test_gemma3_prompt_lookup_across_its_own_window_equals_plain_greedy():
    """gemma3-270m's sliding layers keep 512 tokens: a 560-token prompt and 48 new tokens cross that window."""
    from playground.backends.jax.backend import JaxBackend
    from playground.models import loaded
    from playground.runner import encode_prompt
    from playground.tools.bench_assisted import GROUNDED_PROMPT

    model, _ = loaded.LOADED.get("gemma3-270m", "fp32")
    text = GROUNDED_PROMPT
    while len(encode_prompt(model, text, None)) < 560:
        text += "\n" + GROUNDED_PROMPT
    ids = encode_prompt(model, text, None)
    plain = RunSpec(model="gemma3-270m", backend="jax", cache="static", max_new_tokens=48, min_new_tokens=48)
    expected, _ = jax_run(model, ids, plain)
    out = JaxBackend().generate(model, ids, plain.replace(strategy="assisted", prompt_lookup=10),
                                lambda _: None, lambda: False)
    assert len(ids) + 48 > 512 + 10
    assert out.sequences[0] == expected.sequences[0]
    assert out.forward_passes < 48

"""JAX assisted decoding on the bundled SmolLM2: prompt lookup on a grounded prompt keeps plain greedy's tokens."""

from __future__ import annotations

import pytest

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground.spec import RunSpec  # noqa: E402
from tests.helpers import jax_run  # noqa: E402


@pytest.mark.slow
def test_prompt_lookup_on_a_grounded_prompt_equals_plain_greedy():
    from playground.backends.jax.backend import JaxBackend
    from playground.models import loaded
    from playground.runner import encode_prompt
    from playground.tools.bench_assisted import GROUNDED_PROMPT

    model, _ = loaded.LOADED.get("smollm2-135m", "fp32")
    ids = encode_prompt(model, GROUNDED_PROMPT, None)
    plain = RunSpec(backend="jax", cache="static", max_new_tokens=96, min_new_tokens=96)
    expected, _ = jax_run(model, ids, plain)
    for cache in ("static", "dynamic"):
        spec = plain.replace(strategy="assisted", prompt_lookup=10, cache=cache)
        out = JaxBackend().generate(model, ids, spec, lambda _: None, lambda: False)
        assert out.sequences[0] == expected.sequences[0]
        assert out.acceptance_rate > 0.5  # the passage is copied: most drafts are right
        assert out.forward_passes < len(out.sequences[0]) / 3

"""JAX decoder on the bundled models: 128 greedy tokens equal model.generate's."""

from __future__ import annotations

import pytest

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground.spec import RunSpec  # noqa: E402
from tests.helpers import encoded, jax_run, torch_greedy  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_bundled_greedy_parity_128_tokens(name):
    from playground.models import loaded

    loaded, _ = loaded.LOADED.get(name, "fp32")
    ids = encoded(loaded, "Write a short story about a dragon who loves tea.")
    spec = RunSpec(backend="jax", cache="static", model=name, max_new_tokens=128, min_new_tokens=128)
    out, _ = jax_run(loaded, ids, spec)
    assert out.sequences[0] == torch_greedy(loaded.model, ids, 128, "dynamic")

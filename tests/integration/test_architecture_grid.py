"""The whole architecture grid: every model PyTorch runs, the JAX path runs with the same greedy tokens, or
refuses before compiling."""

from __future__ import annotations

import functools

import pytest

from playground.backends.jax.model.architectures import VERIFIED, model_type
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from tests.architecture_grid import GRID, PROMPT, build
from tests.helpers import jax_run, tiny_loaded, torch_greedy

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tiny_programs_compile_at_o0")]

# one model per architecture for its two caches, one after the other: the same model object keeps one engine,
# so a short run over the dynamic cache reuses the programs the static cache compiled (the same layouts)
built = functools.lru_cache(maxsize=1)(build)


@pytest.mark.parametrize("cache", ["static", "dynamic"])
@pytest.mark.parametrize("name", sorted(GRID))
def test_parity_or_refusal(name, cache):
    model = built(name)
    expected = torch_greedy(model, PROMPT, 16, "dynamic")
    spec = RunSpec(max_new_tokens=16, backend="jax", cache=cache)
    if model_type(model.config) not in VERIFIED:
        with pytest.raises(PlaygroundError, match="backend 'torch'"):
            jax_run(tiny_loaded(name, model), PROMPT, spec)
        return
    out, _ = jax_run(tiny_loaded(name, model), PROMPT, spec)
    assert out.sequences[0] == expected

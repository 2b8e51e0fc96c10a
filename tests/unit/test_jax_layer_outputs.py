"""The JAX engine's forward with layer outputs gives the torch model's own hidden states, and a layer's logits are
the output head on that layer's states (what contrastive search and DoLa read), in fp32 and with an int8 head."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches import pytree
from playground.backends.jax.engine.engine import Engine
from playground.spec import RunSpec
from tests.helpers import tiny_llama

IDS = [[5, 17, 99, 3, 42, 7]]


def _layer_outputs(engine: Engine, hidden: tuple[int, ...], heads: tuple[int, ...]):
    ids = jnp.asarray(IDS, jnp.int32)
    plan = cache_plan.plan_cache(RunSpec(max_new_tokens=4), engine.config, ids.shape[1], 8)
    layouts = plan.at(plan.lengths[0])

    def run(weights):
        cache = pytree.empty_cache(layouts, jnp.int32(ids.shape[1]))
        positions = jnp.arange(ids.shape[1], dtype=jnp.int32)[None, :]
        logits, states, head_logits, _ = engine.forward_layers(weights, cache, ids, positions, 0, hidden=hidden,
                                                               heads=heads)
        return logits, states, head_logits

    return jax.jit(run)(engine.weights)


def test_hidden_states_and_layer_logits_are_the_torch_models():
    model = tiny_llama(seed=3, num_hidden_layers=4)
    engine = Engine(model, 1)
    layers = model.config.num_hidden_layers
    logits, states, head_logits = _layer_outputs(engine, hidden=(0, 2, layers), heads=(1, 3))
    with torch.no_grad():
        out = model(torch.tensor(IDS), output_hidden_states=True)
        head = model.get_output_embeddings()
        expected_heads = [head(out.hidden_states[i]) for i in (1, 3)]
    np.testing.assert_allclose(np.asarray(logits), out.logits.numpy(), atol=1e-4)
    for mine, i in zip(states, (0, 2, layers), strict=True):
        np.testing.assert_allclose(np.asarray(mine), out.hidden_states[i].numpy(), atol=1e-4)
    for mine, theirs in zip(head_logits, expected_heads, strict=True):
        np.testing.assert_allclose(np.asarray(mine), theirs.numpy(), atol=1e-4)


@pytest.mark.slow  # the full suite's: int8 engines compile programs no fast test shares
def test_an_int8_head_reads_a_layer_as_it_reads_the_final_states():
    model = tiny_llama(seed=3, num_hidden_layers=2)
    engine = Engine(model, 1, "int8")
    layers = model.config.num_hidden_layers
    logits, _, (final_through_head,) = _layer_outputs(engine, hidden=(), heads=(layers,))
    assert np.asarray(final_through_head) == pytest.approx(np.asarray(logits), abs=1e-5)

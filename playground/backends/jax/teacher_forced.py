"""The JAX model's next-token log-probabilities along a given token sequence: what a weight precision costs in
quality (KL against fp32), measured on the engine that decodes.

The prompt goes through the prefill program, then one jitted scan steps the traced model through the given
tokens with a static cache. The scan is compiled once per engine and cache layout; the token count is padded to
a power of two, so outputs of nearby lengths share it.
"""

from __future__ import annotations

import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from playground.backends.jax.caches.plan import plan_cache, prefill_bucket
from playground.backends.jax.engine import Engine, engine_for
from playground.models.loaded import LoadedModel

_SCANS: weakref.WeakKeyDictionary[Engine, Any] = weakref.WeakKeyDictionary()


def _scan(engine: Engine) -> Any:
    """The engine's jitted teacher-forced scan, made once per engine (held weakly, so it goes with the engine)."""
    known = _SCANS.get(engine)
    if known is not None:
        return known
    engine_ref = weakref.ref(engine)

    @jax.jit
    def steps(weights: dict, cache: Any, tokens: jax.Array, prompt_len: jax.Array) -> jax.Array:
        alive = engine_ref()
        assert alive is not None  # a scan is only called through its live engine
        forward = alive.forward

        def body(cache: Any, xs: tuple[jax.Array, jax.Array]) -> tuple[Any, jax.Array]:
            token, position = xs
            logits, cache = forward(weights, cache, token[None, None], position[None, None], 1)
            return cache, logits[0, -1]

        positions = prompt_len + jnp.arange(tokens.shape[0], dtype=jnp.int32)
        return jax.lax.scan(body, cache, (tokens, positions))[1]

    _SCANS[engine] = steps
    return steps


def logprobs_along(loaded: LoadedModel, spec: Any, prompt_ids: torch.Tensor, new_ids: list[int],
                   room: int = 0) -> torch.Tensor:
    """Log-probabilities (len(new_ids), V) of the token after the prompt and after each new token but the last,
    from the engine for spec's weights and devices, with spec's cache laid out at its final length. `room`: lay
    the cache out for a prompt this long (at least the real one), so prompts of different lengths share one
    layout and one compiled scan; the slots past the prompt's own length are masked, as a growing cache's are."""
    engine, _ = engine_for(loaded.model, spec.devices, spec.weights)
    prompt_len, count = prompt_ids.shape[1], len(new_ids)
    padded_count = 1 << max(0, count - 2).bit_length()  # the scan's length: count - 1 tokens, padded
    plan = plan_cache(spec.replace(max_new_tokens=max(spec.max_new_tokens, padded_count + 1)), engine.config,
                      max(prompt_len, room), 1)
    prefill = engine.prefill_program(prefill_bucket(prompt_len), plan.at(plan.lengths[-1]))
    padded = np.zeros((1, prefill_bucket(prompt_len)), np.int32)
    padded[:, :prompt_len] = prompt_ids.numpy()
    first, cache = prefill(engine.weights, jnp.asarray(padded), jnp.int32(prompt_len))
    rows = [np.asarray(first)]
    if count > 1:
        tokens = np.zeros(padded_count, np.int32)
        tokens[: count - 1] = new_ids[:-1]
        with engine.tracing():  # a first call traces the model; a compile left running by a stopped request may too
            rest = _scan(engine)(engine.weights, cache, jnp.asarray(tokens), jnp.int32(prompt_len))
        rows.append(np.asarray(rest)[: count - 1])
    return torch.log_softmax(torch.from_numpy(np.concatenate(rows)).float(), dim=-1)

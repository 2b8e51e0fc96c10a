"""The sampler lab on JAX: a distribution typed by hand through the run's logits chain, one stage at a time
(playground/sampler_lab.py asks for it and reads the result)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from playground.backends.jax.chain import chain
from playground.backends.jax.chain.chain import Context, Needs
from playground.spec import RunSpec


def stage_logits(spec: RunSpec, logits: np.ndarray, history: tuple[int, ...], names: tuple[str, ...],
                 breakers: frozenset[int]) -> list[np.ndarray]:
    """(V,) logits after each stage of `spec`'s chain named in `names` (in the chain's order), -inf where
    removed. The history is the text generated so far (every id counts as generated); stages that carry a
    state start from their initial one; a random stage draws from the spec's seed."""
    vocab = logits.shape[-1]
    context = Context(vocab, (), None, breakers=breakers)
    built, host_args = chain.build(spec, context, sampling=True,
                                   history=chain.history_capacity(0, len(history) + 1))
    args = jax.device_put(host_args)
    keep = [i for i, (name, _) in enumerate(built.stages) if name in names]
    history_ = _history(history, built.needs, vocab)
    key = jax.random.PRNGKey(spec.seed)
    row = jnp.asarray(logits, jnp.float32)[None, :]  # (1, V)
    outputs = []
    for last in keep:  # the chain up to and including each named stage: what that stage left
        prefix = dataclasses.replace(built, stages=built.stages[:last + 1])
        applied = chain.apply(row, history_, jnp.int32(0), key, prefix, args[:last + 1])
        outputs.append(np.asarray(chain.in_vocab(applied.cands, vocab, -np.inf)[0]))
    return outputs


def _history(ids: tuple[int, ...], needs: Needs, vocab: int) -> chain.History[jax.Array]:
    """The history of a text that is all generated: an empty prompt, then `ids` pushed."""
    empty = chain.start_history(jnp.zeros((1, 1), jnp.int32), jnp.int32(0), needs, vocab)
    if not ids:
        return empty
    return chain.pushed(empty, jnp.asarray([ids], jnp.int32), needs)

"""Beam sampling on the JAX path (jax/strategies/beam.py, BeamMode.samples): its continuations are drawn without
replacement from the softmax of the cumulative scores (Gumbel top-k, as torch.multinomial draws), seeded; with a
temperature that leaves no choice it is beam search on both backends; its filters keep one more token than there
are end tokens, as transformers' warpers do with min_tokens_to_keep."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    MinPLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from playground.backends.jax.chain import chain
from playground.backends.jax.chain.chain import Context, start_history
from playground.backends.jax.strategies import beam_search
from playground.backends.jax.strategies.beam_search import BeamArgs, BeamMode
from playground.spec import RunSpec
from tests.helpers import jax_run, tiny_llama, tiny_loaded, torch_run

IDS = torch.tensor([[5, 17, 42, 99, 3]])
BEAMS = {"num_beams": 3, "num_return_sequences": 3, "max_new_tokens": 16, "backend": "jax"}


@pytest.fixture(scope="module")
def tiny():
    return tiny_loaded("tiny", tiny_llama(seed=2))


@pytest.mark.slow  # beam search's programs too: the fast lane checks beam sampling's seed, draw and filters below
def test_a_temperature_that_leaves_no_choice_gives_beam_searchs_beams_on_both_backends(tiny):
    searched, _ = jax_run(tiny, IDS, RunSpec.from_dict({"strategy": "beam", **BEAMS}))
    temperature = 1e-3  # the warper divides the log-probabilities: every gap between candidates grows 1000-fold
    spec = RunSpec.from_dict({"strategy": "beam_sample", "temperature": temperature, **BEAMS})
    sampled, _ = jax_run(tiny, IDS, spec)
    assert sampled.sequences == searched.sequences
    assert [s * temperature for s in sampled.scores] == pytest.approx(searched.scores, abs=1e-5)
    on_torch, _ = torch_run(tiny, IDS, spec.replace(backend="torch"))
    assert on_torch.sequences == sampled.sequences


def test_beam_sampling_is_seeded(tiny):
    spec = RunSpec.from_dict({"strategy": "beam_sample", "temperature": 1.0, **BEAMS})
    first = jax_run(tiny, IDS, spec)[0].sequences
    assert jax_run(tiny, IDS, spec)[0].sequences == first
    assert jax_run(tiny, IDS, spec.replace(seed=1))[0].sequences != first


def test_the_continuations_are_drawn_from_the_cumulative_scores_softmax():
    """One beam live: the first candidate drawn follows softmax(log p) (4000 draws, each token within 4 sigma)."""
    vocab = 12
    logits = jnp.asarray(np.random.default_rng(0).standard_normal((1, vocab)) * 1.5, jnp.float32)
    spec = RunSpec(strategy="beam_sample", num_beams=2, temperature=1.0)
    built, args = chain.build(spec, Context(vocab, (), None, rows=2, keep=1), sampling=True)
    mode = BeamMode(2, 64, (), built, samples=True)
    search_args = BeamArgs(jnp.float32(1.0), jnp.bool_(False), jnp.int32(16), jax.tree.map(jnp.asarray, args))
    hyps = beam_search.initial(start_history(jnp.zeros((1, 4), jnp.int32), jnp.int32(4), built.needs, vocab), mode)
    logits = jnp.broadcast_to(logits, (2, vocab))

    def first_drawn(key: jax.Array) -> jax.Array:
        return beam_search.step(logits, hyps, mode, search_args, key)[3].tokens[0]

    draws = np.asarray(jax.jit(jax.vmap(first_drawn))(jax.random.split(jax.random.PRNGKey(0), 4000)))
    expected = np.asarray(jax.nn.softmax(logits[0]))
    frequency = np.bincount(draws, minlength=vocab) / len(draws)
    assert np.all(np.abs(frequency - expected) <= 4 * np.sqrt(expected * (1 - expected) / len(draws)) + 1e-3)


@pytest.mark.parametrize(("args", "warper"), [
    ({"top_k": 1}, TopKLogitsWarper(1, min_tokens_to_keep=2)),
    ({"top_p": 0.05}, TopPLogitsWarper(0.05, min_tokens_to_keep=2)),
    ({"min_p": 0.99}, MinPLogitsWarper(0.99, min_tokens_to_keep=2)),
    ({"typical_p": 0.05}, TypicalLogitsWarper(0.05, min_tokens_to_keep=2)),
    ({"epsilon_cutoff": 0.09}, EpsilonLogitsWarper(0.09, min_tokens_to_keep=2)),
    ({"eta_cutoff": 0.09}, EtaLogitsWarper(0.09, min_tokens_to_keep=2)),
])
def test_the_filters_keep_min_tokens_to_keep_as_transformers_warpers(args, warper):
    vocab = 40
    rows = (np.random.default_rng(3).standard_normal((3, vocab)) * 3).astype(np.float32)
    spec = RunSpec.from_dict({"strategy": "sampling", "temperature": 1.0, **args})
    built, args = chain.build(spec, Context(vocab, (), None, keep=2), sampling=True)
    history = start_history(jnp.zeros((3, 4), jnp.int32), jnp.int32(4), built.needs, vocab)
    applied = chain.apply(jnp.asarray(rows), history, jnp.int32(0), None, built, jax.tree.map(jnp.asarray, args))
    kept = np.isfinite(np.asarray(chain.in_vocab(applied.cands, vocab, -np.inf)))
    theirs = np.isfinite(warper(torch.zeros((3, 1), dtype=torch.long), torch.from_numpy(rows.copy())).numpy())
    np.testing.assert_array_equal(kept, theirs)
    assert kept.sum(axis=-1).min() >= 2


@pytest.mark.slow  # the full suite's: every cache's beam programs
@pytest.mark.parametrize("cache", ["static", "quantized", "sliding", "sink"])
def test_a_temperature_that_leaves_no_choice_gives_pytorchs_beams_on_every_cache(tiny, cache):
    """Sliding and sink windows of 8 over 5 + 20 positions: more than 3 windows. The best beam is PyTorch's; the
    others may differ where two continuations' scores lie within the last digits (x 1000 at this temperature)."""
    args = {"quantized": {"cache_bits": 8}, "sliding": {"window": 8}, "sink": {"window": 8, "sink_tokens": 2}}
    spec = RunSpec.from_dict({"strategy": "beam_sample", "temperature": 1e-3, "cache": cache, **BEAMS,
                              "max_new_tokens": 20, **args.get(cache, {})})
    on_jax, _ = jax_run(tiny, IDS, spec)
    on_torch, _ = torch_run(tiny, IDS, spec.replace(backend="torch"))
    if cache != "quantized":  # the two quantized stores round differently
        assert on_jax.sequences[0] == on_torch.sequences[0]
    assert len(on_jax.sequences) == 3 and jax_run(tiny, IDS, spec)[0].compile_s == 0.0  # a repeat compiles nothing

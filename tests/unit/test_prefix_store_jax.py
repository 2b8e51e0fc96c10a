"""The JAX path on the prefix store: a run that continues a kept cache over its prompt's suffix gives the cold run's
tokens and probabilities (a partial match: test_prefix_store.py), a long suffix runs in chunks, the entry is left as
it was, and what is not built runs cold with the reason."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from playground.backends.jax.backend import JaxBackend
from playground.backends.prefix_store import PrefixStore, ReusePlan, settings_key
from playground.spec import RunSpec
from tests.helpers import fast_lane_keeps, tiny_gemma
from tests.unit.test_prefix_store import (
    NEW_IDS,
    RUNS,
    SHARED,
    assert_same,
    assert_same_drafts,
    held_after,
    warm_against_cold,
)

SPEC = RunSpec(model="tiny-llama", backend="jax", max_new_tokens=10)
STRATEGIES = {"greedy": {}, "sampling": {"strategy": "sampling", "temperature": 1.3, "top_k": 0, "seed": 11},
              "beam": {"strategy": "beam", "num_beams": 3},
              "beam sampling": {"strategy": "beam_sample", "num_beams": 2, "seed": 3},
              "prompt lookup": {"strategy": "assisted", "prompt_lookup": 3, "max_new_tokens": 16}}
CACHES = {"dynamic": {"cache": "dynamic"}, "static": {"cache": "static"},
          "bf16": {"cache": "dynamic", "cache_dtype": "bf16"}}


def run(loaded, ids: list[int], spec: RunSpec, plan: ReusePlan | None = None):
    return RUNS["jax"](loaded, ids, spec, plan)


# the fast lane: greedy, sampling and beam search on the dynamic cache (beam sampling and prompt lookup, whose
# warm starts are beam search's and greedy's, in the full suite)
@pytest.mark.parametrize("cache", fast_lane_keeps(list(CACHES)))
@pytest.mark.parametrize("strategy", [name if name not in ("beam sampling", "prompt lookup")
                                      else pytest.param(name, marks=pytest.mark.slow) for name in STRATEGIES])
def test_a_warm_jax_run_gives_the_cold_runs_tokens_and_probabilities(tiny, cache, strategy):
    spec = SPEC.replace(**CACHES[cache], **STRATEGIES[strategy])
    assert JaxBackend().reuse_refusal(tiny, spec) is None
    first = run(tiny, SHARED, spec)
    second = SHARED + first.sequences[0] + NEW_IDS  # the next turn: the answer, then new ids
    warm, cold = warm_against_cold(tiny, spec, SHARED, second)
    assert warm.reused_tokens == held_after(strategy, first.sequences[0]) and cold.reused_tokens == 0
    assert_same(warm, cold)
    if cache == "bf16" and strategy in ("greedy", "sampling"):  # the bf16 store's warm runs are measured
        assert warm.vs_cold is not None and warm.vs_cold["exact"] and warm.vs_cold["kl_mean"] < 1e-9
    if strategy == "prompt lookup":
        assert_same_drafts(warm, cold)
    if strategy.startswith("beam"):
        assert warm.scores == pytest.approx(cold.scores, abs=1e-5)


@pytest.mark.parametrize("new", fast_lane_keeps([70, 600], keep=1))  # the fast lane: past a chunk, past the slots
def test_a_suffix_longer_than_the_kept_cache_is_prefilled_past_it(tiny, new):
    """The suffix's padded bucket reaches past the entry's and the first layouts' slots (no padding wraps onto the
    kept prefix); past one prefill chunk it runs in chunks."""
    suffix = [100 + i % 150 for i in range(new)]
    warm, cold = warm_against_cold(tiny, SPEC, SHARED[:4], SHARED[:4] + suffix)
    assert warm.reused_tokens == 4
    assert_same(warm, cold)


def test_the_entry_is_left_as_it_was_after_a_warm_run(tiny):
    store = PrefixStore(budget=lambda: 10**9)
    key = settings_key(SPEC, "s")
    left = run(tiny, SHARED, SPEC, ReusePlan(None, keep=True)).kept
    store.put(key, left)
    before = jax.tree.map(np.array, jax.tree.leaves(left.snapshot))
    match = store.lookup(key, SHARED[:8] + [3, 3, 3], 10)
    assert match is not None
    run(tiny, SHARED[:8] + [3, 3, 3], SPEC, ReusePlan(match, keep=False))
    after = jax.tree.leaves(left.snapshot)
    assert all(np.array_equal(np.asarray(a), b) for a, b in zip(after, before, strict=True))


@pytest.mark.parametrize(("changes", "words"), [
    ({"cache": "sink", "strategy": "beam", "num_beams": 2}, "one-row runs"),
    ({"cache": "sliding", "strategy": "assisted", "prompt_lookup": 3}, "one-row runs"),
    ({"strategy": "dola"}, "prefills whole"), ({"strategy": "contrastive"}, "whole prompt")])
def test_what_jax_does_not_keep_runs_cold_with_the_reason(tiny, changes, words):
    reason = JaxBackend().reuse_refusal(tiny, SPEC.replace(**changes))
    assert reason is not None and words in reason


def test_a_model_with_sliding_layers_runs_cold_on_jax_with_the_reason():
    from playground.backends.jax.prefix_reuse import refusal

    reason = refusal(SPEC, tiny_gemma().config.get_text_config(decoder=True))
    assert reason is not None and "sliding layers" in reason


@pytest.mark.slow  # a saved model's JAX programs: the fast lane checks the runner's scopes on PyTorch
def test_jax_runs_of_one_scope_reuse_through_the_runner(tmp_path, monkeypatch):
    from playground import runner
    from playground.backends import prefix_store
    from tests.helpers import allowed_tiny_model

    prefix_store.STORE.clear()
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        spec = RunSpec(model=path, backend="jax", max_new_tokens=6)
        prompt = "a long shared system prompt, then a question"

        def result(text: str, **changes):
            for event in runner.run(text, spec.replace(**changes), scope="visitor", judged=False):
                if hasattr(event, "result"):
                    return event.result
            raise AssertionError("no result")

        first = result(prompt)
        assert first["reuse"]["reused_tokens"] == 0 and first["reuse"]["store_bytes"] > 0
        warm, cold = result(prompt + " and another"), result(prompt + " and another", reuse=False)
        assert warm["reuse"]["reused_tokens"] == len(prompt) and warm["text"] == cold["text"]
        contrastive = result(prompt, strategy="contrastive")["reuse"]
        assert contrastive["reused_tokens"] == 0 and "whole prompt" in contrastive["note"]
    prefix_store.STORE.clear()

"""The prefix store on the PyTorch caches restored whole (quantized, sliding, sink): the state a warm run starts
from is the one the earlier run left, bit for bit; the warm run is measured against the cold run, and the
measurement agrees with the cold run's own tokens; a partial match is cut back only where the entry still holds
the state at the cut, else the run is cold with the reason; Stop during a warm run leaves the entry as it was."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from playground.backends.prefix_store import PrefixStore, ReusePlan, cold_reason, settings_key
from playground.backends.torch import generate as generate_module
from playground.backends.torch.generate import generate
from playground.backends.torch.prefix_reuse import refusal
from playground.backends.torch.restored_reuse import restore
from playground.spec import RunSpec
from tests.helpers import fast_lane_keeps
from tests.unit.test_prefix_store import SHARED, assert_same

SPEC = RunSpec(model="tiny-llama", max_new_tokens=10)
LONG = SHARED * 2  # 32 ids: past the small windows below, and an even count (quanto's groups of 64 values)
CACHES = {
    "quanto-4": {"cache": "quantized", "cache_bits": 4, "residual_length": 8},
    "fp8": {"cache": "quantized", "cache_bits": 8},
    "sliding-12": {"cache": "sliding", "window": 12},
    "sliding-64": {"cache": "sliding", "window": 64},
    "sink-16": {"cache": "sink", "window": 16, "sink_tokens": 4},
    "sink-64": {"cache": "sink", "window": 64, "sink_tokens": 4},
}


def run(loaded, ids: list[int], spec: RunSpec, plan: ReusePlan | None = None, stop=lambda: False):
    return generate(loaded, torch.tensor([ids]), spec, lambda new: None, stop, reuse=plan)


def state(value: Any) -> list[Any]:
    """Every tensor and number a layer holds, quanto's packed tensors opened into their inner tensors."""
    if isinstance(value, (list, tuple)):
        return [item for part in value for item in state(part)]
    if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
        names, _ = value.__tensor_flatten__()
        return [item for name in names for item in state(getattr(value, name))]
    if isinstance(value, torch.Tensor | int | float | bool) or value is None:
        return [value]
    return []


def layers_state(layers: list[Any]) -> list[Any]:
    return [(name, state(value)) for layer in layers for name, value in sorted(vars(layer).items())]


def same_state(a: list[Any], b: list[Any]) -> bool:
    """Bit for bit: equal tensors (dtype, shape, values) and equal numbers, under the same attribute names."""
    if len(a) != len(b):
        return False
    for (name, left), (other, right) in zip(a, b, strict=True):
        if name != other or len(left) != len(right):
            return False
        for x, y in zip(left, right, strict=True):
            if isinstance(x, torch.Tensor):
                if not (isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)):
                    return False
            elif x != y:
                return False
    return True


def kept_run(tiny, spec: RunSpec, ids: list[int], monkeypatch):
    """A run keeping its cache, and the live cache object it ran over."""
    made = []

    def capture(*args):
        made.append(real(*args))
        return made[-1]

    real = generate_module.make_cache
    monkeypatch.setattr(generate_module, "make_cache", capture)
    out = run(tiny, ids, spec, ReusePlan(None, keep=True))
    monkeypatch.setattr(generate_module, "make_cache", real)
    return out, made[0]


@pytest.mark.parametrize("cache", ["quanto-4", "fp8", "sink-16"])
def test_the_restored_state_is_the_state_the_run_left_bit_for_bit(tiny, cache, monkeypatch):
    spec = SPEC.replace(**CACHES[cache])
    out, live = kept_run(tiny, spec, LONG, monkeypatch)
    left = out.kept
    assert left is not None and left.ids == tuple(LONG + out.sequences[0][:-1])
    assert same_state(layers_state(left.snapshot), layers_state(live.layers))
    fresh = generate_module.make_cache(spec, tiny.model, len(LONG))
    match = PrefixStore(budget=lambda: 10**9)
    match.put(settings_key(spec, "s"), left)
    found = match.lookup(settings_key(spec, "s"), list(left.ids) + [7], len(left.ids))
    assert found is not None and found.shared == len(left.ids) and restore(found, fresh) is None
    assert same_state(layers_state(fresh.layers), layers_state(live.layers))
    if cache == "quanto-4":  # the quantized store and its full-precision residual are both there
        assert live.layers[0].residual() > 0 and live.layers[0]._quantized_keys is not None


def warm_and_cold(tiny, spec: RunSpec, first: list[int], second: list[int]):
    store = PrefixStore(budget=lambda: 10**9)
    key = settings_key(spec, "s")
    store.put(key, run(tiny, first, spec, ReusePlan(None, keep=True)).kept)
    match = store.lookup(key, second, len(second) - 1)
    assert match is not None
    return run(tiny, second, spec, ReusePlan(match, keep=True)), run(tiny, second, spec)


@pytest.mark.parametrize("cache", list(CACHES))
def test_a_warm_run_is_measured_against_the_cold_run_and_the_measure_agrees_with_it(tiny, cache):
    spec = SPEC.replace(**CACHES[cache])
    assert refusal(spec, tiny.model) is None
    first = run(tiny, LONG, spec)
    second = LONG + first.sequences[0] + [40, 41, 42, 43]  # the next turn: the answer, then new ids
    warm, cold = warm_and_cold(tiny, spec, LONG, second)
    assert warm.reused_tokens == len(LONG) + len(first.sequences[0]) - 1 and warm.reuse_note is None
    measured = warm.vs_cold
    assert measured is not None and cold.vs_cold is None and measured["kl_mean"] >= 0.0
    difference = measured["first_difference"]
    if difference is None:  # greedy: the cold run's tokens are the warm run's, as far as the measure says
        assert warm.sequences == cold.sequences
    else:
        assert warm.sequences[0][:difference] == cold.sequences[0][:difference]
    if measured["exact"]:
        assert_same(warm, cold)
    if cache in ("sliding-12", "sliding-64", "sink-64"):  # a window that still holds what the suffix attends to
        assert measured["exact"] and measured["kl_max"] < 1e-9
    if cache == "sink-16":  # the kept window attends over less than the whole prompt did: measured, not hidden
        assert not measured["exact"] and measured["kl_max"] > 1e-6


@pytest.mark.parametrize("cache", ["sliding", "quantized"])
def test_a_model_with_sliding_layers_keeps_the_caches_kept_whole(cache):
    from tests.helpers import tiny_gemma, tiny_loaded

    gemma = tiny_loaded("tiny-gemma", tiny_gemma())
    spec = SPEC.replace(cache=cache, cache_bits=8)  # fp8 for the global layers: any prompt length
    assert refusal(spec, gemma.model) is None and refusal(SPEC, gemma.model) is not None
    first = run(gemma, LONG, spec)
    second = LONG + first.sequences[0] + [40, 41, 42, 43]
    warm, cold = warm_and_cold(gemma, spec, LONG, second)
    assert warm.reused_tokens == len(LONG) + len(first.sequences[0]) - 1 and warm.vs_cold is not None
    difference = warm.vs_cold["first_difference"]
    assert warm.sequences[0][:difference] == cold.sequences[0][:difference]

@pytest.mark.parametrize(("cache", "reason"), [
    ("dynamic", None), ("static", None), ("bf16", None), ("fp8", None), ("sliding-64", None), ("sink-64", None),
    ("quanto-4", "the quantized store holds token 20 quantized; only its last 1 full-precision tokens"),
    ("sliding-12", "the window no longer holds token 9"),
    ("sink-16", "the sink cache has evicted tokens 4-"),
])
def test_a_partial_match_is_cut_back_where_the_entry_holds_the_cut_else_runs_cold_with_the_reason(tiny, cache,
                                                                                                   reason):
    changes = {"cache": "dynamic", "cache_dtype": "bf16"} if cache == "bf16" else CACHES.get(cache, {"cache": cache})
    spec = SPEC.replace(**changes)
    second = LONG[:20] + [2, 2, 2, 2]  # parts from LONG at its 21st id
    warm, cold = warm_and_cold(tiny, spec, LONG, second)
    if reason is None:
        assert warm.reused_tokens == 20 and warm.reuse_note is None
        if warm.vs_cold is None or warm.vs_cold["exact"]:
            assert_same(warm, cold)
    else:
        assert warm.reused_tokens == 0 and warm.reuse_note is not None and warm.reuse_note.startswith(reason)
        assert_same(warm, cold)  # it ran cold


def test_stop_during_a_warm_run_leaves_the_entry_for_the_next_run(tiny):
    spec = SPEC.replace(**CACHES["quanto-4"])
    store = PrefixStore(budget=lambda: 10**9)
    key = settings_key(spec, "s")
    left = run(tiny, LONG, spec, ReusePlan(None, keep=True)).kept
    store.put(key, left)
    before = layers_state(left.snapshot)
    second = list(left.ids) + [40, 41, 42, 43, 44]
    stopped = run(tiny, second, spec, ReusePlan(store.lookup(key, second, len(second) - 1), keep=False),
                  stop=lambda: True)
    assert stopped.stopped and stopped.reused_tokens == len(left.ids)
    assert same_state(layers_state(left.snapshot), before)
    again = run(tiny, second, spec, ReusePlan(store.lookup(key, second, len(second) - 1), keep=False))
    assert again.reused_tokens == len(left.ids) and len(again.sequences[0]) == spec.max_new_tokens


def test_restored_caches_keep_one_row_with_the_reason(tiny):
    for cache in ("quantized", "sliding", "sink"):
        beam = refusal(SPEC.replace(cache=cache, strategy="beam", num_beams=2), tiny.model)
        assert beam is not None and "one-row runs" in beam
        assert cold_reason("greedy", cache, backend="jax") is None


# -- JAX: the same layouts kept whole, continued one token per step -----------------------------------------------
JAX_CACHES = {
    "sliding-12": ("the window no longer holds token 9", 1e-6),
    "sliding-64": (None, 1e-6),
    "quanto-4": ("the full-precision residual no longer holds token 13", None),
    "sink-16": ("the sink cache's recent ring no longer holds token 9", None),
}


def jax_run(loaded, ids: list[int], spec: RunSpec, plan: ReusePlan | None = None):
    from playground.backends.jax.decoder import generate as jax_generate

    return jax_generate(loaded, ids, spec, lambda new: None, lambda: False, reuse=plan)


# the fast lane keeps the window that no longer holds the cut; the quantized layout's restore has its own check
@pytest.mark.parametrize("cache", fast_lane_keeps(list(JAX_CACHES)))
def test_a_warm_jax_run_is_measured_against_cold_and_a_partial_match_is_cut_back_or_cold(tiny, cache):
    from playground.backends.jax.backend import JaxBackend

    spec = SPEC.replace(backend="jax", **CACHES[cache])
    assert JaxBackend().reuse_refusal(tiny, spec) is None
    reason, kl_below = JAX_CACHES[cache]
    store = PrefixStore(budget=lambda: 10**9)
    key = settings_key(spec, "s")
    first = jax_run(tiny, LONG, spec, ReusePlan(None, keep=True))
    store.put(key, first.kept)
    second = LONG + first.sequences[0] + [40, 41, 42, 43]
    warm = jax_run(tiny, second, spec, ReusePlan(store.lookup(key, second, len(second) - 1), keep=False))
    cold = jax_run(tiny, second, spec)
    assert warm.reused_tokens == len(LONG) + len(first.sequences[0]) - 1 and warm.reuse_note is None
    measured = warm.vs_cold
    assert measured is not None and cold.vs_cold is None
    difference = measured["first_difference"]
    if difference is None:
        assert warm.sequences == cold.sequences
    else:
        assert warm.sequences[0][:difference] == cold.sequences[0][:difference]
    if kl_below is not None:  # the window still holds what the suffix attends to: the cold run's figures
        assert measured["exact"] and measured["kl_max"] < kl_below
    if cache == "sink-16":
        assert not measured["exact"] and measured["kl_max"] > 1e-6
    partial = LONG[:20] + [2, 2, 2, 2]
    cut = jax_run(tiny, partial, spec, ReusePlan(store.lookup(key, partial, len(partial) - 1), keep=False))
    if reason is None:
        assert cut.reused_tokens == 20 and cut.reuse_note is None and cut.vs_cold["exact"]
    else:
        assert cut.reused_tokens == 0 and cut.reuse_note == reason and cut.vs_cold is None
        assert cut.sequences == jax_run(tiny, partial, spec).sequences


def test_the_jax_quantized_layout_is_restored_as_the_run_left_it_bit_for_bit(tiny, monkeypatch):
    import jax
    import numpy as np

    from playground.backends.jax import restored_reuse

    spec = SPEC.replace(backend="jax", **CACHES["quanto-4"])
    left = []
    real = restored_reuse.snapshot

    def capture(cache, ids):
        left.append([{name: np.asarray(a[:1]) for name, a in layer.arrays.items()} for layer in cache.jax_layers])
        return real(cache, ids)

    monkeypatch.setattr(restored_reuse, "snapshot", capture)
    kept = jax_run(tiny, LONG, spec, ReusePlan(None, keep=True)).kept
    assert kept is not None and {"keys", "keys_data", "keys_scale"} <= set(left[0][0])  # residual and store
    held = len(kept.ids)
    for layer, before in zip(kept.snapshot.jax_layers, left[0], strict=True):
        restored = restored_reuse.laid_out(layer, layer.layout, jax.numpy.int32(held))
        assert set(restored) == set(before)
        assert all(np.array_equal(np.asarray(restored[name]), before[name]) for name in before)


def test_the_column_notice_says_how_a_warm_run_differs_from_cold():
    from playground.ui.reuse_view import reuse_words

    record = {"reused_tokens": 40, "prompt_tokens": 45, "exact": False, "note": None, "store_bytes": 1,
              "kl_vs_cold": 3.1e-4, "kl_vs_cold_max": 2e-3, "first_difference": 0}
    words = reuse_words({"metrics": {"ttft_s": 0.01}, "reuse": record})
    assert words == "reused 40 of 45 prompt tokens · TTFT 0.01 s · differs from cold: KL 3.1e-04 nats, first at " \
                    "new token 0"
    same = record | {"exact": True, "kl_vs_cold": 4e-12, "first_difference": None}
    assert reuse_words({"metrics": {"ttft_s": 0.01}, "reuse": same}).endswith("· same as cold (KL 4.0e-12)")


def test_an_api_choice_carries_its_runs_reuse_record():
    from dataclasses import replace

    from playground.openai_api.generation import Outcome
    from playground.openai_api.shaping import metrics

    record = {"reused_tokens": 40, "prompt_tokens": 45, "exact": False, "note": None, "store_bytes": 1,
              "kl_vs_cold": 3.1e-4, "kl_vs_cold_max": 2e-3, "first_difference": 0}
    outcome = Outcome(index=0, prompt_index=0, text="x", finish_reason="stop", completion_tokens=1, prompt_tokens=45,
                      logprobs=None, result={"metrics": {}, "spec": {"cache": "sink"}, "reuse": record})
    assert metrics(outcome)["reuse"] == record and metrics(outcome)["cache"] == "sink"
    assert metrics(replace(outcome, result=None))["reuse"] is None

@pytest.mark.slow  # the bundled SmolLM2: two chat turns on a sliding window
def test_a_second_chat_turn_of_smollm2_on_a_sliding_window_reuses_and_says_how_it_differs_from_cold():
    from playground import runner
    from playground.backends import prefix_store

    prefix_store.STORE.clear()
    spec = RunSpec(model="smollm2-135m", max_new_tokens=12, cache="sliding", window=128)

    def turn(text: str, history, **changes):
        for event in runner.run(text, spec.replace(**changes), history=history, scope="chat", judged=False):
            if hasattr(event, "result"):
                return event.result
        raise AssertionError("no result")

    first = turn("Name three colours, then say why the sky is blue.", None)
    history = [("Name three colours, then say why the sky is blue.", first["text"])]
    warm = turn("And the sea?", history)
    cold = turn("And the sea?", history, reuse=False)
    record = warm["reuse"]
    assert record["reused_tokens"] > first["prompt_tokens"] and record["kl_vs_cold"] is not None
    difference = record["first_difference"]
    assert warm["token_ids"][:difference] == cold["token_ids"][:difference]
    if record["exact"]:
        assert warm["token_ids"] == cold["token_ids"]
    prefix_store.STORE.clear()

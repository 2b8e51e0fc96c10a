"""The prefix store: lookup by the longest common prefix within one settings key and scope, LRU eviction within its
byte budget, the memory budget counting it, and PyTorch runs that start from a kept cache giving the cold run's
tokens and probabilities on the exact caches."""

from __future__ import annotations

import pytest
import torch

from playground.backends import prefix_store
from playground.backends.prefix_store import Kept, PrefixStore, ReusePlan, fit_beside_store, settings_key
from playground.backends.torch.generate import generate
from playground.backends.torch.prefix_reuse import refusal
from playground.errors import PlaygroundError
from playground.result import Result
from playground.spec import RunSpec
from tests.helpers import fast_lane_keeps, tiny_gemma

SHARED = [5, 17, 42, 99, 3, 250, 7, 64, 12, 33, 80, 1, 2, 9, 77, 120]
SPEC = RunSpec(model="tiny-llama", max_new_tokens=10)


def kept(ids: list[int], nbytes: int = 100) -> Kept:
    return Kept(tuple(ids), snapshot=None, nbytes=nbytes)


def budget(nbytes: int) -> PrefixStore:
    return PrefixStore(budget=lambda: nbytes)


# -- the store, without a model -------------------------------------------------------------------------------
def test_lookup_takes_the_longest_common_prefix_within_the_same_settings_and_scope():
    store = budget(10_000)
    key = settings_key(SPEC, "session-a")
    store.put(key, kept([1, 2, 3, 4]))
    store.put(key, kept([1, 2, 9, 9, 9]))
    store.put(settings_key(SPEC, "session-b"), kept([1, 2, 3, 4, 5, 6]))
    store.put(settings_key(SPEC.replace(cache_dtype="bf16"), "session-a"), kept([1, 2, 3, 4, 5, 6]))
    match = store.lookup(key, [1, 2, 3, 4, 5, 6], usable=5)
    assert match is not None and match.entry.ids == (1, 2, 3, 4) and match.shared == 4
    assert store.lookup(key, [1, 2, 3], usable=2).shared == 2  # a run prefills at least its last id
    assert store.lookup(key, [8, 8], usable=1) is None
    assert store.lookup(settings_key(SPEC, "session-c"), [1, 2, 3, 4, 5, 6], usable=5) is None


def test_an_entry_replaces_the_entries_it_extends():
    store = budget(10_000)
    key = settings_key(SPEC, "s")
    store.put(key, kept([1, 2, 3]))
    store.put(key, kept([1, 2, 3, 4, 5]))
    assert len(store) == 1 and store.bytes == 100


def test_the_store_never_exceeds_its_budget_and_evicts_the_least_recently_used():
    store = budget(1000)
    key = settings_key(SPEC, "s")
    for first in range(30):  # 30 entries of 130 bytes into 1000
        store.put(key, kept([first, 1, 2], nbytes=130))
        assert store.bytes <= 1000
    assert len(store) == 7
    store.lookup(key, [23, 1, 2], usable=2)  # used: now the most recent
    store.put(key, kept([99, 1], nbytes=130))
    assert store.lookup(key, [23, 1, 2], usable=2) is not None  # kept; the oldest other one went
    assert store.lookup(key, [24, 1, 2], usable=2) is None
    store.put(key, kept([7], nbytes=5000))  # larger than the whole budget: not kept, nothing evicted for it
    assert len(store) == 7


def test_the_budget_setting(monkeypatch):
    monkeypatch.delenv(prefix_store.ENV, raising=False)
    assert prefix_store.budget_bytes() == prefix_store.DEFAULT_MB * 2**20
    monkeypatch.setenv(prefix_store.ENV, "0")
    assert prefix_store.budget_bytes() == 0
    plan, note = prefix_store.plan(SPEC, "s", None, [1, 2, 3], store=PrefixStore())
    assert plan is None and note is not None and "off" in note
    for bad in ("lots", "-5", "nan"):
        monkeypatch.setenv(prefix_store.ENV, bad)
        with pytest.raises(PlaygroundError, match="PLAYGROUND_PREFIX_CACHE_MB"):
            prefix_store.budget_bytes()


def test_a_run_without_a_scope_or_with_reuse_off_leaves_the_store_alone():
    store = budget(10_000)
    assert prefix_store.plan(SPEC, None, None, [1, 2], store=store) == (None, None)
    plan, note = prefix_store.plan(SPEC.replace(reuse=False), "s", None, [1, 2], store=store)
    assert plan is None and note == "reuse is off for this run"


def test_the_memory_budget_counts_the_store_and_empties_it_only_where_that_lets_the_run_go():
    store = budget(10_000)
    store.put(settings_key(SPEC, "s"), kept([1, 2], nbytes=600))

    def check(free: int):
        def fits(stored: int) -> None:
            if stored + 500 > free:
                raise PlaygroundError("the KV cache needs about 500 bytes")
        return fits

    assert fit_beside_store(check(2000), store) == 0 and store.bytes == 600  # fits beside it
    with pytest.raises(PlaygroundError, match="emptying it would not be enough"):
        fit_beside_store(check(400), store)
    assert store.bytes == 600
    assert fit_beside_store(check(900), store) == 600 and store.bytes == 0  # fits once it is emptied


# -- PyTorch: warm runs against cold ones ----------------------------------------------------------------------
def run(loaded, ids: list[int], spec: RunSpec, plan: ReusePlan | None = None):
    return generate(loaded, torch.tensor([ids]), spec, lambda new: None, lambda: False, reuse=plan)


def jax_run(loaded, ids: list[int], spec: RunSpec, plan: ReusePlan | None = None):
    from playground.backends.jax.decoder import generate as jax_generate

    return jax_generate(loaded, ids, spec, lambda new: None, lambda: False, reuse=plan)


RUNS = {"torch": run, "jax": jax_run}


def warm_against_cold(loaded, spec: RunSpec, first: list[int], second: list[int]):
    """Run `first` keeping its cache, then `second` from the store and cold (on spec's backend); both outputs of
    `second`."""
    run = RUNS[spec.backend]
    store = budget(10**9)
    key = settings_key(spec, "s")
    left = run(loaded, first, spec, ReusePlan(None, keep=True)).kept
    assert left is not None
    store.put(key, left)
    match = store.lookup(key, second, len(second) - 1)
    assert match is not None
    warm = run(loaded, second, spec, ReusePlan(match, keep=True))
    cold = run(loaded, second, spec)
    return warm, cold


def assert_same(warm, cold) -> None:
    assert warm.sequences == cold.sequences
    for hot, frozen in zip(warm.token_info or [], cold.token_info or [], strict=True):
        assert hot["p"] == pytest.approx(frozen["p"], abs=1e-5)
        assert hot["p_model"] == pytest.approx(frozen["p_model"], abs=1e-5)


def assert_same_drafts(warm, cold) -> None:
    """Prompt lookup drafted (the prompt's n-grams recur) and its verify passes kept the same drafts warm and cold."""
    assert warm.assisted_steps == cold.assisted_steps and warm.draft_flags == cold.draft_flags
    assert cold.extra["draft_tokens_proposed"] > 0


STRATEGIES = {
    "greedy": {},
    "sampling": {"strategy": "sampling", "temperature": 1.3, "top_k": 0, "seed": 11},
    "beam": {"strategy": "beam", "num_beams": 3},
    "beam sampling": {"strategy": "beam_sample", "num_beams": 2, "seed": 3},
    "prompt lookup": {"strategy": "assisted", "prompt_lookup": 3, "max_new_tokens": 16},  # it drafts from its loop
    "dola": {"strategy": "dola"},  # PyTorch only: its loop's prefill is generate()'s, reading the last position
}
NEW_IDS = [40, 41, 5, 17, 42]  # the next turn's own ids; "5 17" recurs, so prompt lookup drafts from the prompt


def held_after(strategy: str, first_answer: list[int]) -> int:
    """The positions a kept run holds: a search's rows share only the prompt's; one row holds its answer but the
    last token (never fed back)."""
    return len(SHARED) if strategy.startswith("beam") else len(SHARED) + len(first_answer) - 1


@pytest.mark.parametrize("cache", ["dynamic", "static", "bf16"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_warm_run_gives_the_cold_runs_tokens_and_probabilities(tiny, cache, strategy):
    store = {"cache": "dynamic", "cache_dtype": "bf16"} if cache == "bf16" else {"cache": cache}
    spec = SPEC.replace(**store, **STRATEGIES[strategy])
    first = run(tiny, SHARED, spec, ReusePlan(None, keep=True))
    # the next turn: the first run's prompt and answer, then new ids
    second = SHARED + first.sequences[0] + NEW_IDS
    warm, cold = warm_against_cold(tiny, spec, SHARED, second)
    assert warm.reused_tokens == held_after(strategy, first.sequences[0]) and cold.reused_tokens == 0
    assert_same(warm, cold)
    if strategy == "prompt lookup":
        assert_same_drafts(warm, cold)


@pytest.mark.parametrize("cache", fast_lane_keeps(["static", "dynamic"], keep=1))  # the fast lane: dynamic
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_a_partial_match_crops_the_entry_to_the_common_prefix(tiny, backend, cache):
    spec = SPEC.replace(cache=cache, backend=backend)
    warm, cold = warm_against_cold(tiny, spec, SHARED + [1, 1, 1, 1], SHARED + [2, 2])
    assert warm.reused_tokens == len(SHARED)
    assert_same(warm, cold)


def test_the_entry_is_left_as_it_was_after_a_warm_run(tiny):
    store = budget(10**9)
    key = settings_key(SPEC, "s")
    left = run(tiny, SHARED, SPEC, ReusePlan(None, keep=True)).kept
    store.put(key, left)
    before = [(k.clone(), v.clone()) for k, v in left.snapshot]
    match = store.lookup(key, SHARED[:8] + [3, 3, 3], 10)
    run(tiny, SHARED[:8] + [3, 3, 3], SPEC, ReusePlan(match, keep=False))
    pairs = zip(left.snapshot, before, strict=True)
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in pairs)


@pytest.mark.parametrize(("changes", "words"), [
    ({"cache": "sliding", "strategy": "beam", "num_beams": 2}, "one-row runs"),
    ({"cache": "sink", "strategy": "beam", "num_beams": 2}, "sink"),
    ({"cache": "quantized", "strategy": "beam", "num_beams": 2}, "quantized"),
    ({"cache": "quantized", "strategy": "assisted", "prompt_lookup": 3}, "one-row runs"),
    ({"cache": "sliding", "strategy": "dola"}, "one-row runs"),
    ({"strategy": "contrastive"}, "whole prompt"),
    ({"strategy": "assisted", "assistant": "tiny-llama"}, "draft model")])
def test_caches_and_strategies_that_are_not_exact_under_reuse_run_cold_with_the_reason(tiny, changes, words):
    reason = refusal(SPEC.replace(**changes), tiny.model)
    assert reason is not None and words in reason


def test_a_model_with_sliding_layers_runs_cold_with_the_reason():
    reason = refusal(SPEC, tiny_gemma())
    assert reason is not None and "sliding layers" in reason


# -- through the runner: scopes ----------------------------------------------------------------------------
@pytest.fixture
def local_model(tmp_path, monkeypatch):
    from tests.helpers import allowed_tiny_model

    prefix_store.STORE.clear()
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        yield path
    prefix_store.STORE.clear()


def test_runs_of_one_scope_reuse_and_other_scopes_never_do(local_model):
    from playground import runner

    spec = RunSpec(model=local_model, max_new_tokens=6)
    prompt = "a long shared system prompt, then a question"

    def reuse(text: str, scope: str | None, **changes):
        for event in runner.run(text, spec.replace(**changes), scope=scope, judged=False):
            if hasattr(event, "result"):
                return event.result.get("reuse")
        raise AssertionError("no result")

    first = reuse(prompt, "visitor-a")
    assert first["reused_tokens"] == 0 and first["store_bytes"] > 0
    again = reuse(prompt + " and another", "visitor-a")
    assert again["reused_tokens"] == len(prompt) and again["prompt_tokens"] == len(prompt) + 12
    assert reuse(prompt + " and another", "visitor-b")["reused_tokens"] == 0
    off = reuse(prompt, "visitor-a", reuse=False)
    assert off["reused_tokens"] == 0 and off["note"] == "reuse is off for this run"
    assert reuse(prompt, None) is None  # no scope: the store is not involved
    cold = reuse(prompt, "visitor-a", cache="sink", strategy="beam", num_beams=2)
    assert cold["reused_tokens"] == 0 and "sink" in cold["note"] and cold["kl_vs_cold"] is None
    for window in (16, 64):
        assert reuse(prompt, "visitor-a", cache="sink", window=window)["reused_tokens"] == 0
    # restored and cut back to the prompt (the window of 64 has evicted nothing), measured against cold
    sink = reuse(prompt + " and another", "visitor-a", cache="sink", window=64)
    assert sink["reused_tokens"] == len(prompt) and sink["kl_vs_cold"] is not None
    evicted = reuse(prompt + " and another", "visitor-a", cache="sink", window=16)
    assert evicted["reused_tokens"] == 0 and evicted["note"].startswith("the sink cache has evicted tokens 4-")


# -- the page ----------------------------------------------------------------------------------------------
def test_the_column_notice_says_what_was_reused_or_why_the_prompt_ran_whole():
    from playground.ui.reuse_view import page_scope, reuse_words

    warm = {"metrics": {"ttft_s": 0.042}, "reuse": {"reused_tokens": 812, "prompt_tokens": 845, "exact": True,
                                                    "note": None, "store_bytes": 1}}
    assert reuse_words(warm) == "reused 812 of 845 prompt tokens · TTFT 0.04 s"
    cold = {"metrics": {"ttft_s": 0.4}, "reuse": {"reused_tokens": 0, "prompt_tokens": 845, "exact": True,
                                                  "note": "a sink cache continued ...", "store_bytes": 1}}
    assert reuse_words(cold) == "prefilled whole: a sink cache continued ..."
    assert reuse_words({"metrics": {"ttft_s": 0.4}}) is None
    assert page_scope("abc", 0) != page_scope("abc", 1) != page_scope("xyz", 1)
    assert page_scope("", 0) is None


def test_a_step_restores_the_step_before_it_and_runs_one_token(local_model):
    import threading

    from playground import runner
    from playground.ui import stepping
    from playground.ui.step_runs import absorb, step_spec
    from playground.ui.step_tree import StepTree

    prompt = "the lamp"  # 8 byte tokens
    spec = RunSpec(model=local_model, max_new_tokens=12, chat=False)
    tree = StepTree(spec.to_dict())
    reused = []
    for _ in range(3):
        step = step_spec(tree, 1)
        assert isinstance(step, RunSpec)
        result = stepping._run_step(prompt, step, threading.Event(), lambda *a, **k: None, 0, "step-session")
        absorb(tree, result, step.max_new_tokens)
        reused.append(result["reuse"]["reused_tokens"])
    assert reused == [0, 8, 9]  # after the first step, only the last token of the branch runs
    whole = runner.run_to_result(prompt, spec.replace(max_new_tokens=3))
    assert tree.ids() == whole["token_ids"]  # the tokens greedy gives without steps


def test_a_reuse_bench_row_keeps_the_prefix_and_a_step_row_times_the_steps(local_model):
    """The fast lane's check of the bench: one restored cache's row and the step row on PyTorch (the full suite's
    test below runs every cache on both backends)."""
    from playground.tools import bench_reuse

    tokenizer, ids = bench_reuse._texts(local_model)
    with bench_reuse._long_prompts(40 + bench_reuse.NEW_TOKENS + 8):
        row = bench_reuse.reuse_row(local_model, "torch", "sink", 40, tokenizer, ids)
        step = bench_reuse.step_row(local_model, "torch", tokenizer, ids, 24)
    assert row["reused_tokens"] >= 39 and row["store_bytes"] > 0 and row["ttft_warm_s"] > 0
    assert row["exact"] is True or row["exact"]["kl_vs_cold"] >= 0
    assert step["step"] and step["step_s"] > 0 and step["prompt_tokens"] == 24
    table = bench_reuse.format_table({"model": local_model, "rows": [row, step]})
    assert "TTFT cold" in table and "step at 24 tokens" in table


@pytest.mark.slow  # every cache on both backends: the fast lane keeps the one-row check above
@pytest.mark.extended  # the full suite keeps the one-row and step-row checks above, and every cache's reuse tests
def test_the_reuse_bench_gives_a_row_per_cache_and_backend_and_a_step_row(local_model):
    from playground import registry
    from playground.tools.bench_reuse import format_table, run_reuse_suite

    result = run_reuse_suite(local_model, lambda message: None, shared=(40,), step_prompt=24)
    rows = result["rows"]
    warm = {(r["backend"], r["cache"]): r for r in rows if "ttft_cold_s" in r}
    exact = {(backend, cache) for backend in ("torch", "jax") for cache in ("dynamic", "static", "dynamic-bf16")}
    restored = {(backend, cache) for backend in ("torch", "jax") for cache in ("quantized", "sliding", "sink")}
    assert set(warm) == exact | restored == {(backend, cache) for backend in ("torch", "jax")
                                             for cache in [*registry.cache_names(), "dynamic-bf16"]}
    for key, row in warm.items():
        assert row["reused_tokens"] >= 39 and row["store_bytes"] > 0
        assert row["exact"] is True or (key in restored and row["exact"]["kl_vs_cold"] >= 0)
    assert not [r for r in rows if "note" in r]  # every cache on both backends is kept
    steps = [r for r in rows if r.get("step")]
    assert [r["backend"] for r in steps] == ["torch", "jax"] and all(r["step_s"] > 0 for r in steps)
    assert "TTFT cold" in format_table(result)


def test_the_reuse_checkbox_is_disabled_with_the_reason_where_the_column_prefills_whole():
    from playground.ui.card_groups import reuse_knob_state

    assert reuse_knob_state("greedy", "static")["reuse"][0] is True
    for backend in ("torch", "jax"):  # kept whole, measured against cold
        assert reuse_knob_state("greedy", "sink", backend)["reuse"][0] is True
    usable, info = reuse_knob_state("beam", "sink")["reuse"]
    assert usable is False and info.startswith("prefills whole: the sink cache is kept for one-row runs")
    assert reuse_knob_state("contrastive", "dynamic")["reuse"][0] is False
    assert reuse_knob_state("greedy", "static", "jax")["reuse"][0] is True
    assert reuse_knob_state("beam", "static", "jax")["reuse"][0] is True
    assert reuse_knob_state("assisted", "dynamic", "jax")["reuse"][0] is True
    usable, info = reuse_knob_state("diverse_beam", "static", "jax")["reuse"]
    assert usable is False and "prefills whole" in info


def test_the_reuse_checkbox_shows_on_both_backends_and_torch_compile_on_pytorch_only():
    from playground.ui.columns import visibility

    for backend in ("torch", "jax"):
        shown = visibility("greedy", "dynamic", backend)
        assert shown["reuse"] and shown["torch_compile"] == (backend == "torch")


@pytest.mark.slow  # the bundled SmolLM2: two chat turns
def test_the_second_chat_turn_of_smollm2_reuses_the_first_and_gives_the_cold_text():
    from playground import runner

    prefix_store.STORE.clear()
    spec = RunSpec(model="smollm2-135m", max_new_tokens=16)

    def turn(text: str, history: list[tuple[str, str]] | None, scope: str | None, **changes) -> Result:
        for event in runner.run(text, spec.replace(**changes), history=history, scope=scope, judged=False):
            if hasattr(event, "result"):
                return event.result
        raise AssertionError("no result")

    first = turn("Name a colour.", None, "chat-session")
    history = [("Name a colour.", first["text"])]
    warm = turn("And another one?", history, "chat-session")
    cold = turn("And another one?", history, "chat-session", reuse=False)
    assert warm["reuse"]["reused_tokens"] > first["prompt_tokens"]  # the first turn's prompt and its answer
    assert warm["token_ids"] == cold["token_ids"]
    assert [t["p"] for t in warm["tokens"]] == pytest.approx([t["p"] for t in cold["tokens"]], abs=1e-5)
    prefix_store.STORE.clear()

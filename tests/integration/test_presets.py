"""Every preset on the bundled models, run as the page runs it: its point shows in the results.

Each test prints the preset's wall time (all its columns, loads included), the machine's load average, and the
figures it checks. Wall times are printed, not asserted: on a shared 2-core machine they say more about the
neighbours than about the preset.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence

import pytest

from playground import runner
from playground.result import Result
from playground.spec import RunSpec
from playground.ui.chat import MODES
from playground.ui.presets import EVERY_CACHE_WINDOW, PRESETS, SHOOT_OUT_WINDOW
from playground.ui.table import metric_value

pytestmark = pytest.mark.slow


def run_preset(name: str, columns: int | None = None, least: float = 0.5) -> dict[str, Result]:
    """The preset's first `columns` columns (all by default) in turn, as the page runs them (page seed 0, the
    preset's prompt format); each column writes at least `least` of its tokens (a preset whose column ends at
    once shows nothing)."""
    preset = PRESETS[name]
    start = time.monotonic()
    results = {}
    for position, column in enumerate(preset.columns[:columns]):
        spec = RunSpec.from_dict({**column, "seed": 0, "chat": MODES[preset.mode]})
        key = f"{position + 1}:{spec.strategy}:{spec.cache}:{spec.backend}:{spec.temperature}:{spec.prompt_lookup}"
        results[key] = runner.run_to_result(preset.prompt, spec)
        assert results[key]["new_tokens"] >= spec.max_new_tokens * least, (key, results[key]["text"])
    elapsed = time.monotonic() - start
    print(f"\n{name}: {elapsed:.1f} s for {len(results)} columns (load average {os.getloadavg()[0]:.1f})")
    return results


def table_rows(results: list[Result], *keys: str) -> dict[str, list[float | int | None]]:
    """The metrics table's rows `keys`, a value per column: the numbers the page shows."""
    return {key: [metric_value(r, key) for r in results] for key in keys}


def first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)


def rejects_drafts(result: Result) -> bool:
    """Some verification pass rejected a draft: the column has struck-through tokens to show."""
    return any(step["accepted"] < len(step["drafted"]) for step in result["assisted_steps"] or [])


def _kv(result: Result) -> list[int]:
    return list(result["timeline"]["kv_cache_bytes"])


def test_sampling_shows_variety_next_to_greedy_and_beam():
    results = run_preset("Greedy vs sampling vs beam")
    texts = {key.split(":")[1] + key.split(":")[4]: r["text"] for key, r in results.items()}
    print({k: t[:60] for k, t in texts.items()})
    greedy = next(t for k, t in texts.items() if k.startswith("greedy"))
    samples = [t for k, t in texts.items() if k.startswith("sampling")]
    assert len(samples) == 2 and all(s != greedy for s in samples) and samples[0] != samples[1]
    assert all(r["new_tokens"] > 20 for r in results.values())


def test_cache_shoot_out_evicts_and_the_quantized_cache_packs_in_a_sawtooth():
    results = {key.split(":")[2]: r for key, r in run_preset("Cache shoot-out").items()}
    final = {cache: r["metrics"]["kv_cache_bytes"] for cache, r in results.items()}
    drops = sum(1 for a, b in zip(_kv(results["quantized"]), _kv(results["quantized"])[1:], strict=False) if b < a)
    print(f"final KV bytes {final}; quantized drops {drops}")
    assert final["dynamic"] > final["quantized"] and final["dynamic"] > final["sliding"]
    assert final["dynamic"] > final["sink"]
    assert drops >= 2  # the sawtooth: it grows in full precision, then packs
    drifts = {}
    for windowed in ("sliding", "sink"):  # full from some step on: the window evicts
        trace = _kv(results[windowed])
        assert trace[-1] == trace[len(trace) // 2] and trace[-1] < _kv(results["dynamic"])[-1], windowed
        # the same text until the window is full, then (after eviction) its own
        prompt_tokens = results[windowed]["prompt_tokens"]
        drift = first_difference(results[windowed]["token_ids"], results["dynamic"]["token_ids"])
        print(f"{windowed}: drifts from dynamic at token {drift} ({prompt_tokens} prompt tokens)")
        assert drift is not None and drift >= SHOOT_OUT_WINDOW - prompt_tokens, windowed
        drifts[windowed] = drift
    assert drifts["sink"] > drifts["sliding"]  # sink keeps the tokens attention leans on, so stays on longer


@pytest.mark.extended  # the same parity: test_jax_decoder.py (bundled greedy), test_browser.py (the preset)
def test_pytorch_and_jax_give_the_same_text():
    results = list(run_preset("PyTorch vs JAX").values())
    speeds = [round(r["metrics"]["tokens_per_s"], 1) for r in results]
    print(f"tokens/s {speeds}; JAX compile {results[-1]['metrics']['compile_s']:.1f} s")
    assert results[0]["spec"]["backend"] == "torch" and results[-1]["spec"]["backend"] == "jax"
    assert all(r["token_ids"] == results[0]["token_ids"] for r in results)
    assert results[0]["new_tokens"] > 20


def test_three_compilers_give_the_same_text_and_torch_compile_compiles_outside_the_timed_run():
    results = list(run_preset("Three compilers").values())
    compiled = results[2]
    print(f"tokens/s {[round(r['metrics']['tokens_per_s'], 1) for r in results]}; compile s "
          f"{[round(r['metrics']['compile_s'], 1) for r in results]}")
    assert [(r["spec"]["backend"], r["spec"]["torch_compile"]) for r in results] == [
        ("torch", "off"), ("torch", "off"), ("torch", "default"), ("jax", "off")]
    assert all(r["token_ids"] == results[0]["token_ids"] for r in results)
    assert compiled["extra"]["torch_compile"]["graphs_compiled_in_run"] == 0  # its compile is in compile_s
    assert compiled["metrics"]["ttft_s"] < 1.0  # not the compile's tens of seconds


def test_assisted_accepts_drafts_on_the_passage_and_keeps_the_greedy_text():
    results = list(run_preset("Assisted vs plain").values())
    plain, assisted = results[0], results[1:]
    rates = [round(r["metrics"]["acceptance_rate"], 2) for r in assisted]
    speed_ups = [round(r["metrics"]["tokens_per_s"] / plain["metrics"]["tokens_per_s"], 2) for r in assisted]
    print(f"acceptance {rates}; forward passes {[r['forward_passes'] for r in results]}; speed-up {speed_ups}")
    assert all(rate > 0.3 for rate in rates) and all(rejects_drafts(r) for r in assisted)
    assert all(r["token_ids"] == plain["token_ids"] for r in assisted)
    # the fewer forward passes behind the speed-up the preset shows; the speed-up itself is a timing, measured by
    # `bench` (its grounded prompt-lookup rows, docs/benchmarks.md), not here beside another test worker
    assert all(r["forward_passes"] < plain["forward_passes"] / 2 for r in assisted)


def test_beam_on_both_backends_returns_the_same_sequences_scores_and_tree():
    torch_beam, jax_beam = run_preset("Beam on PyTorch vs JAX").values()
    print(f"scores torch {torch_beam['scores']} jax {jax_beam['scores']}; tokens/s "
          f"{torch_beam['metrics']['tokens_per_s']:.1f} / {jax_beam['metrics']['tokens_per_s']:.1f}")
    assert (torch_beam["spec"]["backend"], jax_beam["spec"]["backend"]) == ("torch", "jax")
    assert torch_beam["sequences"] == jax_beam["sequences"] and len(jax_beam["sequences"]) == 2
    assert jax_beam["scores"] == pytest.approx(torch_beam["scores"], abs=1e-4, rel=1e-4)
    assert jax_beam["beam_tree"] and len(jax_beam["beam_tree"]) == len(torch_beam["beam_tree"])


def test_assisted_on_both_backends_keeps_plain_greedy_in_fewer_passes():
    plain, torch_lookup, jax_lookup = run_preset("Assisted on PyTorch vs JAX").values()
    print(f"acceptance {torch_lookup['metrics']['acceptance_rate']:.2f} / "
          f"{jax_lookup['metrics']['acceptance_rate']:.2f}; forward passes "
          f"{[r['forward_passes'] for r in (plain, torch_lookup, jax_lookup)]}")
    assert torch_lookup["token_ids"] == plain["token_ids"] == jax_lookup["token_ids"]
    # fewer passes than half plain greedy's: the speed-up's cause (its timing is `bench`'s, not a test's)
    assert jax_lookup["forward_passes"] < plain["forward_passes"] / 2 and jax_lookup["spec"]["cache"] == "static"
    assert torch_lookup["forward_passes"] < plain["forward_passes"] / 2
    assert jax_lookup["metrics"]["acceptance_rate"] > 0.3
    assert rejects_drafts(torch_lookup) and rejects_drafts(jax_lookup)


# each cache's drafts: tests/integration/test_jax_assisted.py (SmolLM2 over the sliding window) and
# test_bundled_grid.py (over the static, sink and quantized caches), and the tiny models' on every cache
@pytest.mark.extended
def test_assisted_on_every_cache_accepts_and_rejects_drafts_on_each():
    """Each column's tokens equal plain greedy's over its cache: tests/integration/test_jax_assisted.py checks
    that on SmolLM2 for every bounded cache; here, that every column has drafts to show, kept and struck."""
    results = run_preset("Assisted on every cache")
    for key, result in results.items():
        steps = result["assisted_steps"]
        print(f"{key}: {sum(s['accepted'] for s in steps)} drafts accepted in {result['forward_passes']} passes")
        assert sum(s["accepted"] for s in steps) > 10 and rejects_drafts(result), key
    windowed = [r for key, r in results.items() if ":sliding:" in key or ":sink:" in key]
    assert all(r["prompt_tokens"] + r["new_tokens"] > EVERY_CACHE_WINDOW for r in windowed)  # the windows evict


def test_each_penalty_breaks_the_repetition_that_plain_sampling_continues():
    from playground.sweep.measures import repeated_ngram_rate

    results = list(run_preset("Samplers against repetition").values())  # DRY, repetition penalty, 3-grams, none
    rates = [repeated_ngram_rate(r["token_ids"], 4) for r in results]
    print([round(rate, 3) for rate in rates], [r["text"][:60] for r in results])
    dry, penalty, ngrams, plain = rates
    assert plain > 0.05  # without a penalty the story copies its repeated sentence again
    assert dry < plain and penalty < plain and ngrams == 0.0  # a 3-gram ban leaves no repeated 4-gram


def test_min_p_and_top_n_sigma_stay_likelier_than_top_p_at_high_temperature():
    results = list(run_preset("Creative samplers at high temperature").values())  # top-p, min-p, top-nσ, XTC
    quality = [r["metrics"]["mean_logprob"] for r in results]
    print([round(q, 2) for q in quality], [r["text"][:60] for r in results])
    top_p, min_p, top_n_sigma, _ = quality
    assert min_p > top_p + 1.0 and top_n_sigma > top_p + 1.0  # nats per token under the fp32 model


def test_the_guide_methods_greedy_loops_contrastive_search_does_not_and_diverse_beam_returns_two_texts():
    """DoLa's column is left out: the preset claims nothing of it that the table counts."""
    from playground.sweep.measures import returned_overlap

    # contrastive search ends its story (EOS) after about half its 64 tokens
    results = list(run_preset("The guide's methods", columns=3, least=0.4).values())
    greedy, contrastive, diverse = results
    rows = table_rows(results, "repeat_4gram_rate", "distinct_2")
    words = [sequence.split() for sequence in diverse["sequences"]]
    parted = first_difference(*words)
    print(rows, f"diverse beam's texts part at word {parted}, overlap {returned_overlap(diverse['sequences']):.2f}",
          [r["text"][:80] for r in results])
    (greedy_repeats, contrastive_repeats, _), (greedy_distinct, contrastive_distinct, _) = rows.values()
    assert greedy_repeats is not None and greedy_repeats > 0.15  # greedy loops on its own sentences
    assert contrastive_repeats == 0.0 and contrastive_distinct is not None and greedy_distinct is not None
    assert contrastive_distinct > greedy_distinct + 0.2
    assert len(words) == 2 and parted is not None and parted < 10  # the two groups' texts part early...
    assert returned_overlap(diverse["sequences"]) < 0.5  # ...and stay apart


def test_json_free_writes_prose_before_its_json_and_both_constrained_outputs_are_valid():
    # a valid object is complete in 22 to 34 of the 60 tokens: each column ends there
    free, schema, regex = run_preset("JSON, free vs schema", least=0.3).values()
    rows = table_rows([free, schema, regex], "constraint_changed_steps")
    print(rows, [r["text"] for r in (free, schema, regex)])
    prose, _, json_text = free["text"].partition("{")
    assert prose.strip() and json.loads("{" + json_text)  # a line of prose, then an object that parses...
    with pytest.raises(json.JSONDecodeError):
        json.loads(free["text"])  # ...so the output as a whole is not JSON
    for constrained in (schema, regex):
        assert constrained["constraint"]["valid"], constrained["constraint"]
    person = json.loads(schema["text"])
    assert set(person) == {"name", "age", "city"} and 0 <= person["age"] <= 120
    assert 1 <= json.loads(regex["text"])["age"] <= 99


def sweep_medians(name: str, *keys: str) -> dict[str, list[float]]:
    """The sweep preset run as the Sweep tab runs it: each measure's medians per value, as its table shows them."""
    from playground.sweep.presets import SWEEP_PRESETS
    from playground.sweep.run import run_sweep

    start = time.monotonic()
    sweep = run_sweep(SWEEP_PRESETS[name].sweep())
    medians = {key: [a[f"{key}_median"] for a in sweep["aggregates"]] for key in keys}
    print(f"\n{name}: {time.monotonic() - start:.1f} s, {len(sweep['rows'])} rows (load average "
          f"{os.getloadavg()[0]:.1f}); medians {medians}")
    return medians


@pytest.mark.extended  # a sweep of bundled-model runs (about 4 min); the sweep's machinery: test_sweep_tab
def test_the_dry_sweep_preset_repeats_fewer_4grams_as_the_multiplier_grows():
    medians = sweep_medians("DRY against repetition", "repeat_4gram_rate", "distinct_2")
    repeats, distinct = medians["repeat_4gram_rate"], medians["distinct_2"]
    assert repeats[0] > 0.2  # without DRY the model copies the repeated sentence again
    assert all(later <= earlier for earlier, later in zip(repeats, repeats[1:], strict=False))
    assert repeats[-1] < repeats[0] / 3 and distinct[-1] > distinct[0] + 0.2


@pytest.mark.extended  # a sweep of bundled-model runs (about 4 min); the sweep's machinery: test_sweep_tab
def test_the_top_n_sigma_sweep_preset_is_likelier_and_less_varied_the_smaller_n():
    medians = sweep_medians("Top-nσ at high temperature", "mean_logprob", "distinct_2")
    (off, *cut), distinct = medians["mean_logprob"], medians["distinct_2"]  # n = 0, then n growing
    assert all(value > off for value in cut)  # off samples the whole tail
    assert all(smaller > larger for smaller, larger in zip(cut, cut[1:], strict=False))
    assert distinct[1] < distinct[-1]  # the smallest n repeats most


def test_pick_one_answers_in_words_when_free_and_exactly_one_label_under_the_choice_list():
    free, greedy, sampled = run_preset("Pick one", least=0.0).values()  # a label is one token and an EOS
    labels = PRESETS["Pick one"].columns[1]["constraint_text"].split("\n")
    print([r["text"] for r in (free, greedy, sampled)])
    assert free["text"].strip() not in labels and len(free["text"].split()) > 2  # a sentence, not a label
    assert greedy["text"] in labels and sampled["text"] in labels
    assert greedy["constraint"]["valid"] and sampled["constraint"]["valid"]

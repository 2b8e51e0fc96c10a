"""Sweeps: the text measures on hand-made ids, the sweep's rows and medians on a tiny model, stops, limits, CLI."""

from __future__ import annotations

import csv
import io
import json
import random
import threading
import time
from collections import Counter

import pytest

from playground.__main__ import main
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from playground.sweep import measures, prompt_sets
from playground.sweep.knobs import moves_kv_cache, moves_tokens_per_pass, parse_values, sweepable
from playground.sweep.run import Sweep, run_sweep, sweep_from_json, to_csv
from tests.helpers import allowed_tiny_model

PROMPTS = ("abc", "hello there")


# -- measures -----------------------------------------------------------------------------------------------------

def test_distinct_n_and_repeats_on_known_texts():
    assert measures.distinct_n([1, 2, 1, 2], 1) == 0.5
    assert measures.distinct_n([1, 2, 1, 2], 2) == pytest.approx(2 / 3)  # (1,2) (2,1) (1,2)
    assert measures.distinct_n([7], 2) is None
    assert measures.repeated_ngram_rate([1, 2, 3, 4, 1, 2, 3, 4]) == pytest.approx(1 / 5)  # the 5th repeats the 1st
    assert measures.repeated_ngram_rate([1, 2, 3, 4, 5]) == 0.0 and measures.repeated_ngram_rate([1, 2]) is None


def test_distinct_and_repeats_equal_a_direct_count():
    rng = random.Random(0)
    for _ in range(50):
        ids = [rng.randrange(4) for _ in range(rng.randrange(4, 40))]
        grams = [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
        counts = Counter(grams)
        assert measures.distinct_n(ids, 4) == len(counts) / len(grams)
        assert measures.repeated_ngram_rate(ids, 4) == sum(c - 1 for c in counts.values()) / len(grams)


def test_agreement_is_the_share_of_the_reference_reproduced_before_the_first_difference():
    assert measures.agreement([1, 2, 3], [1, 2, 3]) == (1.0, None)
    # by position this was 0.75: the tokens after the first difference no longer count
    assert measures.agreement([1, 9, 3, 4], [1, 2, 3, 4]) == (0.25, 1)
    assert measures.agreement([1, 2, 3, 9, 9, 9, 9, 9], [1, 2, 3, 4, 5, 6, 7, 8]) == (3 / 8, 3)
    assert measures.agreement([5, 1, 2, 3], [1, 2, 3, 4]) == (0.0, 0)  # one token out of step: nothing agreed
    assert measures.agreement([1, 2], [1, 2, 3, 4]) == (0.5, 2)  # stopped early: differs where it ended
    assert measures.agreement([1, 2, 3, 4, 5], [1, 2, 3, 4]) == (1.0, 4)  # all of the reference, then more
    assert measures.agreement([], []) == (1.0, None) and measures.agreement([7], []) == (0.0, 0)


def test_self_similarity_is_the_mean_lcs_overlap_of_the_seeds():
    assert measures.self_similarity([[1, 2, 3], [1, 2, 3]]) == 1.0
    assert measures.self_similarity([[1, 2, 3], [4, 5, 6]]) == 0.0 and measures.self_similarity([[1, 2]]) is None
    # one token inserted, then the same text: the alignment still sees 4 shared tokens, 2 x 4 / (4 + 5)
    assert measures.self_similarity([[1, 2, 3, 4], [9, 1, 2, 3, 4]]) == pytest.approx(8 / 9)
    # the same bigrams in another order are not the same text (their 2-gram sets were equal: Jaccard 1.0)
    assert measures.self_similarity([[1, 2, 1, 2], [2, 1, 2, 1]]) == pytest.approx(6 / 8)
    # three seeds: the mean of the three pairs (1.0, 0.0, 0.0)
    assert measures.self_similarity([[1, 2], [1, 2], [3, 4]]) == pytest.approx(1 / 3)
    assert measures.self_similarity([[], []]) == 1.0 and measures.self_similarity([[], [1]]) == 0.0


def test_the_lcs_equals_a_dynamic_programming_table():
    def table(a, b):
        cells = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i, x in enumerate(a):
            for j, y in enumerate(b):
                cells[i + 1][j + 1] = cells[i][j] + 1 if x == y else max(cells[i][j + 1], cells[i + 1][j])
        return cells[-1][-1]

    rng = random.Random(0)
    for _ in range(300):
        a = [rng.randrange(5) for _ in range(rng.randrange(0, 70))]  # past 64 ids: more than one machine word
        b = [rng.randrange(5) for _ in range(rng.randrange(0, 70))]
        assert measures.lcs_length(a, b) == table(a, b), (a, b)


# -- input --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("knob", "text", "fragment"), [
    ("temperature", "0.2,x", "temperature values must be numbers"),
    ("window", "16,32.5", "window values must be whole numbers"),
    ("seed", "1,2", "cannot sweep 'seed'"),
    ("top_p", "", "no values given for top_p"),
    ("top_p", "0.5,0.5", "top_p values repeat"),
])
def test_bad_values_are_refused_with_the_reason(knob, text, fragment):
    with pytest.raises(PlaygroundError, match=fragment):
        parse_values(knob, text)


def test_the_knobs_that_can_move_the_kv_cache_and_the_strategies_that_can_move_tokens_per_pass():
    """Known before a sweep runs, from the registry: the page hides the plots a sweep cannot move."""
    assert {k for k in sweepable() if moves_kv_cache(k)} == {"window", "sink_tokens", "cache_bits",
                                                             "cache_key_bits", "cache_value_bits", "cache_dtype",
                                                             "residual_length", "num_beams", "max_new_tokens"}
    assert not any(moves_kv_cache(k) for k in ("temperature", "top_p", "top_k", "min_p", "prompt_lookup"))
    assert moves_tokens_per_pass("assisted") and moves_tokens_per_pass("beam")
    assert not moves_tokens_per_pass("sampling") and not moves_tokens_per_pass("greedy")


def test_a_value_the_spec_refuses_is_named_before_anything_runs():
    sweep = Sweep("top_p", (0.5, 1.5), RunSpec(strategy="sampling"), PROMPTS)
    with pytest.raises(PlaygroundError, match=r"top_p=1.5: .*top_p"):
        run_sweep(sweep)


def test_a_knob_the_strategy_needs_is_swept_from_a_base_that_holds_its_first_value(capsys):
    """Assisted decoding refuses prompt_lookup=0 with no assistant: the base spec takes the first swept value."""
    sweep = sweep_from_json("grounded", '{"knob": "prompt_lookup", "values": [2, 8], "spec": {"strategy": "assisted"}}')
    assert [s.prompt_lookup for s in sweep.checked_specs()] == [2, 8] and sweep.spec.prompt_lookup == 2
    with pytest.raises(PlaygroundError, match="spec must be a JSON object"):
        sweep_from_json("facts", '{"knob": "top_k", "values": [2], "spec": [1]}')
    with pytest.raises(SystemExit) as stopped:  # the CLI gets as far as checking the model, so the base was valid
        main(["sweep", "--knob", "prompt_lookup", "--values", "2,4", "--strategy", "assisted", "--model", "nope"])
    assert stopped.value.code == 2 and "nope" in capsys.readouterr().err


def test_prompt_sets_ship_eight_prompts_each_and_pasted_prompts_are_one_per_line():
    assert {name: len(s.prompts) for name, s in prompt_sets.SETS.items()} == {"stories": 8, "facts": 8,
                                                                              "grounded": 8, "repeating": 8}
    assert prompt_sets.pasted_prompts("one\n\n  two  \n") == ("one", "two")
    with pytest.raises(PlaygroundError, match="unknown prompt set 'poems'"):
        prompt_sets.prompt_set("poems")
    with pytest.raises(PlaygroundError, match="no prompts given"):
        prompt_sets.pasted_prompts(" \n ")


def test_a_sweep_over_its_token_limit_is_refused(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_SWEEP_TOKENS", "100")
    sweep = Sweep("temperature", (0.5, 1.0), RunSpec(strategy="sampling", max_new_tokens=20), PROMPTS, seeds=2)
    with pytest.raises(PlaygroundError, match=r"up to 200 new tokens in all, over the limit of 100"):
        run_sweep(sweep)  # 2 values x 2 prompts x 2 seeds x 20, and a 20-token reference per prompt


def test_a_public_deployment_caps_a_sweep_lower(monkeypatch):
    monkeypatch.delenv("PLAYGROUND_MAX_SWEEP_TOKENS", raising=False)
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "1")
    sweep = Sweep("top_k", tuple(range(1, 11)), RunSpec(strategy="sampling", max_new_tokens=256), PROMPTS, seeds=8)
    with pytest.raises(PlaygroundError, match=r"over the limit of 5000 \(PLAYGROUND_MAX_SWEEP_TOKENS\)"):
        run_sweep(sweep)


# -- runs ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def model(monkeypatch, tmp_path):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        yield path


def test_a_temperature_sweep_gives_a_row_per_value_prompt_and_seed_and_reproduces(model):
    spec = RunSpec(model=model, strategy="sampling", max_new_tokens=12, min_new_tokens=12, chat=False)
    sweep = Sweep("temperature", (0.3, 1.0, 1.6), spec, PROMPTS, seeds=2)
    seen = []
    first = run_sweep(sweep, progress=lambda done, total, what: seen.append((done, total)))
    assert [(r["value"], r["prompt_index"], r["seed"]) for r in first["rows"]] == [
        (v, p, s) for v in (0.3, 1.0, 1.6) for p in (0, 1) for s in (0, 1)]
    assert seen[0] == (0, 14) and seen[-1] == (14, 14)  # 2 references + 12 rows
    assert [a["value"] for a in first["aggregates"]] == [0.3, 1.0, 1.6] and not first["stopped"]
    for row in first["rows"]:
        assert set(row["measures"]) >= {"distinct_1", "distinct_2", "repeat_4gram_rate", "mean_logprob",
                                        "agreement", "first_divergence"}
        assert 0.0 <= row["measures"]["agreement"] <= 1.0 and row["metrics"]["tokens_per_s"] > 0
    # the two seeds of a prompt differ at the highest temperature, and a second sweep repeats the first
    hot = [r["text"] for r in first["rows"] if r["value"] == 1.6 and r["prompt_index"] == 0]
    assert hot[0] != hot[1]
    assert [r["text"] for r in run_sweep(sweep)["rows"]] == [r["text"] for r in first["rows"]]


def test_greedy_at_the_reference_settings_agrees_with_the_reference(model):
    spec = RunSpec(model=model, max_new_tokens=10, chat=False)
    result = run_sweep(Sweep("max_new_tokens", (5, 10), spec, PROMPTS))
    full = [r for r in result["rows"] if r["value"] == 10]
    assert all(r["measures"]["agreement"] == 1.0 and r["measures"]["first_divergence"] is None for r in full)
    assert result["seeds"] == [0]  # greedy: one run per prompt, whatever --seeds says


def test_a_window_sweep_holds_more_kv_bytes_for_larger_windows(model):
    spec = RunSpec(model=model, cache="sliding", max_new_tokens=40, min_new_tokens=40, chat=False)
    result = run_sweep(Sweep("window", (4, 8, 16), spec, PROMPTS[:1]))
    kv = [a["kv_cache_bytes_median"] for a in result["aggregates"]]
    assert kv[0] < kv[1] < kv[2]


def test_a_stopped_sweep_keeps_the_rows_that_finished(model):
    spec = RunSpec(model=model, max_new_tokens=6, chat=False)
    calls = iter(range(1000))
    # should_stop is asked before each run and at every token of a run: stop partway into the third row's run
    result = run_sweep(Sweep("top_k", (5, 10, 20), spec.replace(strategy="sampling"), PROMPTS[:1]),
                       should_stop=lambda: next(calls) >= 25)
    assert result["stopped"] and 0 < len(result["rows"]) < 3
    assert all(r["text"] for r in result["rows"])


@pytest.mark.slow  # compiles JAX programs of its own
def test_a_jax_temperature_sweep_compiles_once(model):
    spec = RunSpec(model=model, backend="jax", strategy="sampling", max_new_tokens=8, chat=False)
    result = run_sweep(Sweep("temperature", (0.5, 1.0, 1.5), spec, PROMPTS[:1]))
    compile_s = [r["metrics"]["compile_s"] for r in result["rows"]]
    assert compile_s[0] > 0 and compile_s[1:] == [0.0, 0.0]
    assert result["compiles"] == 2  # the greedy reference's programs, and the sampling programs once


def test_the_cli_prints_every_row_and_writes_them_as_csv(model, tmp_path, capsys):
    out_csv, prompts = tmp_path / "rows.csv", tmp_path / "prompts.txt"
    prompts.write_text("first prompt\n\nsecond prompt\n")
    main(["sweep", "--knob", "top_k", "--values", "5,20", "--model", model, "--strategy", "sampling",
          "--max-new-tokens", "6", "--no-chat", "--seeds", "2", "--prompts-file", str(prompts), "--json",
          "--csv", str(out_csv)])
    printed = json.loads(capsys.readouterr().out)
    assert printed["prompts"] == ["first prompt", "second prompt"]
    assert len(printed["rows"]) == 2 * 2 * 2 and len(printed["aggregates"]) == 2
    assert printed["base_spec"]["strategy"] == "sampling" and printed["knob"] == "top_k"
    rows = list(csv.DictReader(io.StringIO(out_csv.read_bytes().decode(), newline="")))
    assert len(rows) == len(printed["rows"]) and rows[0]["text"] == printed["rows"][0]["text"]
    assert to_csv(printed) == out_csv.read_bytes().decode()  # as written: RFC 4180 line ends


def test_the_cli_lists_the_prompt_sets_and_refuses_bad_input_in_one_line(capsys):
    main(["sweep", "--list-prompt-sets"])
    assert capsys.readouterr().out.splitlines()[0].startswith("stories")
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--knob", "temperature", "--values", "hot"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == ("error: temperature values must be numbers separated by commas, "
                                              "got 'hot'")


# -- API ----------------------------------------------------------------------------------------------------------

def test_the_api_takes_pasted_prompts_or_a_set_name_and_returns_the_cli_object(model):
    from playground.ui.sweep_api import api_sweep

    request = json.dumps({"knob": "max_new_tokens", "values": [3, 5], "spec": {"model": model, "chat": False}})
    outputs = list(api_sweep("abc\n\nhello there", request))
    result = outputs[-1]
    assert [(r["value"], r["prompt_index"]) for r in result["rows"]] == [(3, 0), (3, 1), (5, 0), (5, 1)]
    assert result["prompts"] == ["abc", "hello there"] and all(o is None for o in outputs[:-1])
    named = sweep_from_json("facts", json.dumps({"knob": "top_k", "values": "5,10", "seeds": 2}))
    assert named.prompts == prompt_sets.SETS["facts"].prompts and named.values == (5, 10) and named.seeds == 2


@pytest.mark.parametrize(("prompts", "request_text", "fragment"), [
    ("abc", "{", "sweep is not valid JSON"),
    ("abc", '{"knob": "temperature"}', "sweep takes the keys knob, values, spec and seeds"),
    ("abc", '{"knob": "temperature", "values": [1], "colour": 1}', "unknown: colour"),
    ("abc", '{"knob": "top_p", "values": [0.5, 2.0], "spec": {"strategy": "sampling"}}', "top_p=2.0"),
    ("", '{"knob": "top_k", "values": [1]}', "no prompts given"),
])
def test_the_api_refuses_bad_requests_with_the_reason(prompts, request_text, fragment):
    import gradio as gr

    from playground.ui.sweep_api import api_sweep

    with pytest.raises(gr.Error, match=fragment):
        list(api_sweep(prompts, request_text))


def test_a_client_that_goes_away_stops_the_sweep(model, monkeypatch):
    from playground.ui import sweep_api

    monkeypatch.setattr(sweep_api, "HEARTBEAT_S", 0.05)
    request = json.dumps({"knob": "max_new_tokens", "values": [200, 300], "spec": {"model": model, "chat": False}})
    stream = sweep_api.api_sweep("abc\nhello there", request)
    assert next(stream) is None  # running
    start = time.monotonic()
    stream.close()  # what Gradio does when the client disconnects: the run under way stops at its next token
    assert time.monotonic() - start < 5
    assert not any(t.name == "sweep" and t.is_alive() for t in threading.enumerate())

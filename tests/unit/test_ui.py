"""The page's pure parts (tables, diffs, exports, settings, links, token colours); its run handler on a fake runner."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest

from playground.compatibility import WEIGHT_LABELS
from playground.errors import PlaygroundError
from playground.events import DoneEvent, HypothesisEvent, ProgressEvent, TextEvent
from playground.spec import RunSpec
from playground.ui.chat import history, messages, record_turn
from playground.ui.columns import (
    MAX_COLUMNS,
    column_settings,
    control_values,
    notice_text,
    problem,
    visibility,
    weights_choices,
)
from playground.ui.draft_card import DRAFT_MODEL, PROMPT_LOOKUP
from playground.ui.export import (
    decode_url_state,
    encode_url_state,
    page_settings,
    results_csv,
    results_json,
    settings_from_json,
    settings_to_json,
    write_exports,
)
from playground.ui.labels import base_label as label
from playground.ui.plots import (
    BAR_CHARS,
    DRAWN_MS,
    kv_frame,
    latency_cap,
    latency_frame,
    latency_note,
    throughput_frame,
)
from playground.ui.strategy_view import view_of
from playground.ui.table import format_number, metrics_table, process_memory_note
from playground.ui.tokens import divergence_from_first, divergence_report, first_divergence, tokens_html

VERSIONS = {"torch": "2.13.0", "transformers": "5.23.0", "jax": None, "torchax": None, "gradio": "6.31.0"}


def fake_result(ids: list[int], speed: float = 10.0, ttft: float = 0.5, acceptance: float | None = None,
                strategy: str = "greedy", runs: list[float] | None = None) -> dict[str, Any]:
    texts = [f"t{i}" for i in ids]
    return {
        "spec": {**RunSpec(strategy=strategy, prompt_lookup=10 if strategy == "assisted" else 0).to_dict(),
                 "chat": True},
        "text": "".join(texts), "sequences": ["".join(texts)],
        "prompt_tokens": 5, "new_tokens": len(ids), "token_ids": ids, "forward_passes": len(ids), "stopped": False,
        "metrics": {"load_s": 1.0, "compile_s": 0.0, "ttft_s": ttft, "total_s": 2.0, "tokens_per_s": float(speed),
                    "ms_per_token_p50": 1000 / speed, "ms_per_token_p90": 1200 / speed, "kv_cache_bytes": 2**20,
                    "weight_bytes": 100 * 2**20, "peak_rss_bytes": 900 * 2**20, "acceptance_rate": acceptance,
                    **({"tokens_per_s_runs": runs} if runs else {})},
        "versions": VERSIONS,
        "tokens": [{"id": i, "text": t, "p": 0.9, "entropy": 0.3, "p_model": 0.8, "entropy_model": 0.4,
                    "top": [[t, 0.9, 0.8], ["x", 0.05, 0.1]], "draft": None}
                   for i, t in zip(ids, texts, strict=True)],
        "timeline": {"token_ms": [100.0, 90.0][: max(len(ids) - 1, 0)], "token_steps": [2, 3][: max(len(ids) - 1, 0)],
                     "kv_cache_bytes": [2**19, 2**20]},
        "scores": None,
        "beam_tree": None,
        "extra": {},
    }


def row(table: dict[str, Any], prefix: str) -> list[str]:
    return next(r[1:] for r in table["data"] if r[0].startswith(prefix))


# metrics table


def test_the_memory_note_adds_each_engines_compiled_programs_against_their_bound():
    torch_only = [fake_result([1, 2]), None]
    assert process_memory_note(torch_only).startswith(
        "The whole process's resident memory at its highest during these runs: 900 MiB")
    assert "Compiled JAX programs" not in process_memory_note(torch_only)
    jax = [fake_result([1, 2]) for _ in range(3)]
    for result, kept, model in zip(jax, (10, 30, 5), ("a", "a", "b"), strict=True):
        result["spec"]["model"] = model
        result["extra"] = {"program_cache_bytes": kept * 2**20, "program_cache_bound_bytes": 1024 * 2**20}
    # model a's engine: its last column's figure (30 MiB); model b's: 5 MiB; a bound each
    assert "Compiled JAX programs kept in memory: 35 MiB of their 2048 MiB bound" in process_memory_note(jax)


def test_metrics_table_marks_the_best_value_per_row_with_units_in_labels():
    table = metrics_table([fake_result([1, 2], speed=10, ttft=0.5), fake_result([1, 3], speed=20, ttft=0.9)],
                          ["1: greedy", "2: sampling"])
    assert table["headers"] == ["metric", "1: greedy", "2: sampling"]
    assert row(table, "decode speed (tok/s)") == ["10.0", "**★ 20.0**"]  # higher is better
    assert row(table, "TTFT") == ["**★ 0.50**", "0.90"]  # lower is better
    assert row(table, "KV cache (MiB)") == ["1.00", "1.00"]  # a tie marks nothing...
    assert next(r[0] for r in table["data"] if r[0].startswith("KV cache")) == "KV cache (MiB) · no ★: the same"
    assert row(table, "memory: weights + KV cache (MiB)") == ["101", "101"]  # the column's own, not the process's
    assert row(table, "new tokens") == ["2", "2"]  # counts are not ranked
    assert row(table, "load") == ["1.00", "1.00"] and row(table, "compile") == ["0.00", "0.00"]  # order-dependent
    assert not any("★" in cell for cell in row(table, "compile") + row(table, "load"))
    assert not any(r[0].startswith(("draft acceptance", "peak RSS", "KL vs fp32")) for r in table["data"])


def test_the_kl_row_appears_with_a_column_whose_weights_are_not_fp32():
    int8 = fake_result([1, 2])
    int8["metrics"]["kl_vs_fp32"] = 0.0023
    table = metrics_table([fake_result([1, 2]), int8], ["1: fp32", "2: int8"])
    assert row(table, "KL vs fp32 weights (nats)") == ["–", "0.0023"]


@pytest.mark.parametrize(("speeds", "marked"), [((10.0, 11.5), False), ((10.0, 12.5), True), ((10.0, 10.004), False)])
def test_with_one_run_each_a_star_needs_a_20_percent_lead_and_a_visible_difference(speeds, marked):
    table = metrics_table([fake_result([1], speed=speeds[0]), fake_result([2], speed=speeds[1])], ["a", "b"])
    assert any("★" in cell for cell in row(table, "decode speed")) is marked


def test_with_repeats_a_star_needs_a_lead_larger_than_the_spread_of_the_runs():
    noisy = [fake_result([1], speed=10.0, runs=[7.0, 10.0, 13.0]),
             fake_result([2], speed=12.0, runs=[11.0, 12.0, 13.0])]
    assert not any("★" in cell for cell in row(metrics_table(noisy, ["a", "b"]), "decode speed"))
    steady = [fake_result([1], speed=10.0, runs=[9.9, 10.0, 10.1]),
              fake_result([2], speed=11.0, runs=[10.9, 11.0, 11.1])]
    cells = row(metrics_table(steady, ["a", "b"]), "decode speed")
    assert cells == ["10.0 (9.90–10.1)", "**★ 11.0 (10.9–11.1)**"]  # a 10% lead, steady runs: real


def test_totals_are_compared_per_token_when_columns_generated_different_counts():
    table = metrics_table([fake_result([1, 2]), fake_result([1, 2, 3, 4])], ["a", "b"])
    assert row(table, "total per token, compile and load excluded (ms)") == ["1000", "**★ 500**"]


def test_runs_of_different_lengths_are_ranked_per_token_on_counts_and_not_at_all_on_sizes():
    """A column that stopped after 62 tokens does not win "forward passes" against columns of 87 and 96."""
    short, long_, longer = fake_result(list(range(62))), fake_result(list(range(87))), fake_result(list(range(96)))
    table = metrics_table([short, long_, longer], ["1: a", "2: b", "3: c"])
    assert not any(r[0] == "forward passes" for r in table["data"])
    assert row(table, "forward passes per new token") == ["1.00", "1.00", "1.00"]
    assert not any("★" in cell for cell in row(table, "forward passes per new token"))
    for size in ("KV cache (MiB)", "memory: weights + KV cache"):
        assert next(r[0] for r in table["data"] if r[0].startswith(size)).endswith("no ★: runs of different lengths")
    assisted = fake_result(list(range(90)))
    assisted["forward_passes"] = 30
    cells = row(metrics_table([short, assisted], ["1: a", "2: b"]), "forward passes per new token")
    assert cells == ["1.00", "**★ 0.33**"]


def test_columns_that_tie_for_best_share_the_star_and_are_named():
    passes = [fake_result(list(range(7))) for _ in range(3)]
    passes[0]["forward_passes"] = 49
    table = metrics_table(passes, ["1: greedy", "2: assisted", "3: assisted"])
    assert row(table, "forward passes") == ["49", "**★ 7**", "**★ 7**"]
    assert next(r[0] for r in table["data"] if r[0].startswith("forward passes")) == (
        "forward passes · ★ tie: 2 and 3")
    four = [fake_result(list(range(7))) for _ in range(4)]
    four[1]["forward_passes"] = 49
    table = metrics_table(four, ["1: a", "2: b", "3: c", "4: d"])
    assert next(r[0] for r in table["data"] if r[0].startswith("forward passes")).endswith("★ tie: 1, 3 and 4")
    three = metrics_table([fake_result([1, 2]) for _ in range(3)], ["1: a", "2: b", "3: c"])
    assert next(r[0] for r in three["data"] if r[0].startswith("KV cache")) == "KV cache (MiB) · no ★: all the same"


def test_no_ranked_total_includes_compile():
    """A column that compiled 7.65 s of its 9.41 s is not beaten on its total by one that compiled nothing."""
    compiled, eager = fake_result([1, 2]), fake_result([1, 2])
    compiled["metrics"].update(total_s=9.41, compile_s=7.65)
    eager["metrics"].update(total_s=6.79, compile_s=0.0)
    assert row(metrics_table([eager, compiled], ["eager", "jax"]), "total, compile and load excluded (s)") == [
        "6.79", "**★ 1.76**"]


def test_one_timing_each_from_a_busy_machine_gets_no_star_and_says_why():
    quick, slow = fake_result([1], ttft=0.70), fake_result([2], ttft=1.20)
    slow["extra"] = {"machine_load": {"busy": True}}
    table = metrics_table([quick, slow], ["a", "b"])
    assert row(table, "TTFT") == ["0.70", "1.20"]
    assert next(r[0] for r in table["data"] if r[0].startswith("TTFT")).endswith(
        "no ★: one run each on a busy machine")
    assert row(table, "KV cache") == ["1.00", "1.00"]  # not a timing: ranked as before (here, a tie)


def test_metrics_table_shows_acceptance_only_with_an_assisted_column_and_dashes_for_missing_runs():
    table = metrics_table([fake_result([1], acceptance=0.75, strategy="assisted"), None], ["1", "2"])
    assert row(table, "draft acceptance (%)") == ["75.0", "–"]
    assert row(table, "TTFT") == ["0.50", "–"]  # one value: nothing to compare, nothing marked


@pytest.mark.parametrize(("value", "text"), [(None, "–"), (3, "3"), (1234.5, "1234"), (12.34, "12.3"),
                                             (0.5, "0.50"), (0.0012, "0.0012"), (0.0, "0.00")])
def test_numbers_are_short_and_never_scientific(value, text):
    assert format_number(value) == text


def test_one_slow_arrival_is_drawn_at_the_top_edge_and_named_not_left_to_flatten_the_rest():
    steady, stalled = fake_result([1, 2, 3]), fake_result([1, 2, 3])
    steady["timeline"] = {**steady["timeline"], "token_ms": [100.0] * 20, "token_steps": list(range(2, 22))}
    stalled["timeline"] = {**stalled["timeline"], "token_ms": [90.0] * 19 + [60_000.0],
                           "token_steps": list(range(2, 22))}
    results, labels, positions = [steady, stalled], ["1: a", "2: b"], [0, 1]
    points = latency_frame(results, labels, positions).dropna()
    assert latency_cap(results) == 400.0  # 4 x the 90th percentile (100 ms)
    assert points[DRAWN_MS].max() == 400.0 and points["ms/token"].max() == 60_000.0  # the tooltip keeps the truth
    note = latency_note(results)
    assert note.startswith("1 arrival slower than 400 ms") and "60,000 ms" in note
    assert latency_cap([steady]) is None and latency_note([steady]) == ""  # nothing to cut: the plain scale
    assert (latency_frame([steady], ["1: a"], [0]).dropna()[DRAWN_MS] == 100.0).all()


def test_plot_frames_are_typed_and_name_every_column_position():
    results, labels, positions = [fake_result([1, 2, 3]), None], ["1: greedy", None], [0, None]
    speed, latency, kv = (throughput_frame(results, labels, positions), latency_frame(results, labels, positions),
                          kv_frame(results, labels, positions))
    bars = speed[speed["tokens/s"] > 0]
    assert list(bars["run"]) == ["1: greedy"] and list(bars["column"]) == ["col 1"]
    assert speed["tokens/s"].dtype == float and set(speed["bar"]) == {"1: greedy"}  # no empty category on the axis
    assert set(speed["column"]) == {"col 1", "col 2"}  # every slot in the colour domain, as in the lines
    points = latency.dropna()
    assert list(points["token"]) == [2, 3] and list(points["ms/token"]) == [100.0, 90.0]
    assert set(points["run"]) == {"1: greedy"} and set(points["column"]) == {"col 1"}
    assert set(latency["column"]) == {"col 1", "col 2"}  # an empty slot still names its colour
    assert list(kv.dropna()["KV cache (MiB)"]) == [0.5, 1.0]
    assert throughput_frame([], [], [])["tokens/s"].dtype == float  # typed when empty: the plot keeps its axis type


def test_speed_bars_carry_the_columns_names_cut_to_fit_a_phone():
    """Each bar is named by its column (number, strategy, cache, what differs), not "col 1"; a long name is cut,
    the tooltip keeps it whole."""
    long = "2: sampling · dynamic · top-k 5 · temperature 1.3"
    results, labels, positions = [fake_result([1, 2]), fake_result([1, 2])], ["1: greedy · dynamic", long], [0, 1]
    speed = throughput_frame(results, labels, positions)
    assert list(speed["bar"]) == ["1: greedy · dynamic", "2: sampling · dynamic…"] and list(speed["run"]) == [
        "1: greedy · dynamic", long]
    assert all(len(name) <= BAR_CHARS for name in speed["bar"])


def test_step_plots_name_only_the_running_columns_and_span_whole_steps():
    from playground.ui.plots import MIN_STEP_SPAN, PALETTE, series_colours, step_axes

    axes = step_axes(2, [8, 80])
    assert axes == {"colors_in_legend": ["col 1", "col 2"], "x_lim": [1, 80]}
    assert step_axes(1, [4])["x_lim"] == [1, MIN_STEP_SPAN]  # a short run still gets whole-step ticks
    assert list(series_colours(4).values()) == list(PALETTE)  # one palette: cards, lines and bars


# token view and divergence


def test_first_divergence_gives_the_index_and_both_tokens():
    assert first_divergence(fake_result([1, 2, 3]), fake_result([1, 2, 3])) is None
    assert first_divergence(fake_result([1, 2, 3]), fake_result([1, 5, 3])) == (1, "t2", "t5")
    assert first_divergence(fake_result([1, 2]), fake_result([1, 2, 7])) == (2, "(end)", "t7")


def test_divergence_report_compares_every_pair_of_finished_columns():
    report = divergence_report([fake_result([1, 2]), fake_result([1, 2]), fake_result([1, 9]), None],
                               ["A", "B", "C", "D"])
    assert "**A** = **B**: identical (2 tokens)" in report
    assert "**A** vs **C**: first differ at token 1: `'t2'` vs `'t9'`" in report
    assert "D" not in report
    assert divergence_from_first([fake_result([1, 2]), fake_result([1, 9]), None]) == [None, 1, None]


def test_tokens_are_coloured_by_probability_or_entropy_with_alternatives_on_hover():
    tokens = [{"id": 1, "text": "<b>", "p": 1.0, "entropy": 0.0, "p_model": 0.5, "entropy_model": 2.0,
               "top": [["<b>", 1.0, 0.5]], "draft": True},
              {"id": 2, "text": " x", "p": 0.0, "entropy": 9.0, "p_model": 0.0, "entropy_model": 9.0, "top": None,
               "draft": False},
              {"id": 3, "text": "\n", "p": None, "entropy": None, "p_model": None, "entropy_model": None,
               "top": None, "draft": None}]
    by_p = tokens_html(tokens, "probability (as drawn)", diverge_at=1, view=view_of("assisted"))
    assert "hsl(120," in by_p and "hsl(0," in by_p
    assert "&lt;b&gt;" in by_p and "<b>" not in by_p  # model text is escaped, never markup
    assert "class='tok draft'" in by_p and "class='tok diverge'" in by_p
    assert "&#x27;&lt;b&gt;&#x27;: 1.000 · 0.500" in by_p  # the top alternatives, both probabilities, on hover
    assert "↵</span><br>" in by_p  # a newline token stays visible; its line break follows the span
    assert "<br></span>" not in tokens_html(tokens, diverge_at=2)  # an outlined newline: no empty box
    by_model = tokens_html(tokens, "model probability")
    assert "hsl(60," in by_model  # p_model 0.5: halfway
    by_entropy = tokens_html(tokens, "entropy (as drawn)")
    assert by_entropy.index("hsl(120,") < by_entropy.index("hsl(0,")  # 0 nats green, 9 nats red
    assert "after a run" in tokens_html(None)


# columns: knobs that apply, settings <-> controls


def test_only_the_knobs_of_the_current_choice_are_shown():
    shown = visibility("sampling", "dynamic", "torch", {"draft_source": DRAFT_MODEL})
    assert shown["sampling_knobs"] and not shown["beam_knobs"] and not shown["bits_knobs"] and not shown["devices"]
    shown = visibility("assisted", "sink", "jax", {"draft_source": PROMPT_LOOKUP})
    assert shown["draft_knobs"] and shown["prompt_lookup"] and not shown["assistant"]
    assert shown["window_box"] and shown["sink_tokens"] and shown["devices"]


def test_hidden_knobs_stay_out_of_the_settings_so_they_cannot_refuse_a_run():
    values = control_values({"strategy": "greedy"}) | {"num_return_sequences": 3.0, "temperature": 0.2}
    settings = column_settings(values)
    assert "num_return_sequences" not in settings and "temperature" not in settings
    assert problem(settings) == ""
    beam = column_settings(control_values({"strategy": "beam"}) | {"num_beams": 4.0, "num_return_sequences": 2.0})
    assert beam["num_return_sequences"] == 2 and isinstance(beam["num_beams"], int)


def test_assisted_column_takes_exactly_one_draft_source():
    values = control_values({"strategy": "assisted", "assistant": "smollm2-135m"})
    assert column_settings(values)["assistant"] == "smollm2-135m" and "prompt_lookup" not in column_settings(values)
    lookup = column_settings(values | {"draft_source": PROMPT_LOOKUP, "prompt_lookup": 7.0})
    assert lookup["prompt_lookup"] == 7 and "assistant" not in lookup
    assert control_values(lookup)["draft_source"] == PROMPT_LOOKUP


def test_an_assisted_column_drafts_by_prompt_lookup_unless_a_draft_model_is_given():
    """The main model drafting for itself accepts every draft and shows nothing; prompt lookup rejects some."""
    fresh = control_values({"strategy": "assisted"})
    assert fresh["draft_source"] == PROMPT_LOOKUP
    assert column_settings(fresh)["prompt_lookup"] == 10 and "assistant" not in column_settings(fresh)
    switched = control_values({"strategy": "greedy"}) | {"strategy": "assisted"}  # a column switched to assisted
    assert column_settings(switched)["prompt_lookup"] == 10


def test_assisted_sampling_is_a_column_control_that_brings_the_sampling_knobs():
    from playground.spec import RunSpec
    from playground.ui.columns import visibility

    values = control_values({"strategy": "assisted", "prompt_lookup": 4}) | {"temperature": 0.7, "top_k": 20.0}
    greedy = column_settings(values)
    assert "assisted_sampling" not in greedy and "temperature" not in greedy  # off: greedy, no sampling knobs
    sampled = column_settings(values | {"assisted_sampling": True})
    assert sampled["assisted_sampling"] is True and sampled["temperature"] == 0.7 and sampled["top_k"] == 20
    spec = RunSpec.from_dict(sampled)
    assert spec.assisted_sampling and spec.temperature == 0.7 and problem(sampled) == ""
    assert control_values(sampled)["assisted_sampling"] is True  # a shared link sets the box again
    assert visibility("assisted", "dynamic", "torch", None, True)["sampling_knobs"]
    assert not visibility("assisted", "dynamic", "torch", None, False)["sampling_knobs"]
    assert label(0, sampled) == "1: assisted (prompt lookup n=4, sampled) · dynamic"


def test_refused_combinations_are_flagged_with_the_reason():
    text = notice_text({"backend": "jax", "weights": "bf16"})
    assert text.startswith("⚠ ")
    assert "bf16 weights are not offered on the JAX path on a CPU: XLA on CPU hoists their conversion" in text
    assert notice_text({"backend": "jax", "weights": "int8"}) == ""
    assert weights_choices("jax") == [("fp32", "fp32"), ("bf16 ✗ on jax", "bf16"), ("int8", "int8"),
                                      ("nf4 ✗ on jax", "nf4"), (WEIGHT_LABELS["q4"], "q4")]
    assert WEIGHT_LABELS["q4"].startswith("q4: 4-bit")
    assert weights_choices("torch")[-1] == ("q4 ✗ on torch", "q4")
    assert all(label == value for label, value in weights_choices("torch")[:-1])
    assert notice_text({"backend": "jax", "strategy": "assisted", "cache": "sink", "prompt_lookup": 4}) == ""
    assert label(1, {"strategy": "beam", "cache": "static", "backend": "jax"}) == "2: beam · static · jax"
    assert label(1, {"strategy": "greedy", "cache": "static", "backend": "jax", "weights": "int8"}) == (
        "2: greedy · static · jax · int8")


# reproducibility: settings JSON, links, exports


SETTINGS = page_settings("Hi <there> & 'you'", 7, "raw", [
    {"model": "smollm2-135m", "strategy": "greedy", "cache": "static", "max_new_tokens": 24},
    {"model": "smollm2-135m", "strategy": "sampling", "cache": "dynamic", "temperature": 0.7, "top_p": 0.9},
])


def test_settings_json_round_trips_and_bad_settings_name_the_problem():
    assert settings_from_json(settings_to_json(SETTINGS)) == SETTINGS
    with pytest.raises(PlaygroundError, match="not valid JSON"):
        settings_from_json("{nope")
    with pytest.raises(PlaygroundError, match="column 2: temperature"):
        settings_from_json(json.dumps({**SETTINGS, "columns": [{}, {"temperature": -1.0}]}))
    with pytest.raises(PlaygroundError, match="seed, repeats and chat are page-wide"):
        settings_from_json(json.dumps({"columns": [{"seed": 3}]}))
    with pytest.raises(PlaygroundError, match="1 to 4"):
        settings_from_json(json.dumps({"columns": [{}] * 5}))
    with pytest.raises(PlaygroundError, match="unknown settings key"):
        settings_from_json(json.dumps({"colums": []}))


def test_url_state_round_trips_to_the_same_runs_and_rejects_garbage():
    token = encode_url_state(SETTINGS)
    assert token.isascii() and "=" not in token and "/" not in token and "+" not in token
    decoded = decode_url_state(token)
    assert (decoded["prompt"], decoded["seed"], decoded["mode"]) == (SETTINGS["prompt"], 7, "raw")
    for before, after in zip(SETTINGS["columns"], decoded["columns"], strict=True):
        assert RunSpec.from_dict(before) == RunSpec.from_dict(after)  # defaults dropped, the same run
    for bad in ("", "!!!", "eJzLSM3JyQcABiwCFQ", "A" * 20_000):
        with pytest.raises(PlaygroundError):
            decode_url_state(bad)
    with pytest.raises(PlaygroundError, match="this link is damaged") as refused:
        decode_url_state(token[: len(token) // 2])  # a link cut short when copied
    assert "zlib" not in str(refused.value) and "Error -" not in str(refused.value)


def test_exports_carry_settings_results_and_versions(tmp_path):
    results = [fake_result([1, 2]), None, fake_result([1, 3], speed=20)]
    labels = ["1: greedy", "2: x", "3: sampling"]
    exported = json.loads(results_json(SETTINGS, results))
    assert exported["versions"] == VERSIONS and exported["settings"] == SETTINGS
    assert [r["column"] for r in exported["results"]] == [1, 3]
    rows = list(csv.DictReader(io.StringIO(results_csv(results, labels))))
    assert [r["label"] for r in rows] == ["1: greedy", "3: sampling"]
    assert rows[1]["tokens_per_s"] == "20.0" and rows[0]["version_torch"] == "2.13.0" and rows[0]["text"] == "t1t2"
    assert rows[0]["forced_prefix"] == ""
    branched = fake_result([1, 2]) | {"prefix": {"ids": [7, 8], "text": "Once upon", "pieces": ["Once", " upon"]}}
    row = next(csv.DictReader(io.StringIO(results_csv([branched], ["1: greedy"]))))
    assert row["forced_prefix"] == "Once upon" and row["text"] == "t1t2"  # what was forced, then what was generated
    written = write_exports(SETTINGS, results, labels)
    assert written.json.exists() and written.csv.read_text().startswith("column,label,model")
    assert re.fullmatch(r"decoding-playground-\d{8}-\d{6}\.json", written.json.name)  # timestamped
    assert written.logprobs_csv.read_text().startswith("column,label,position,forced,id")


def test_exports_name_the_machine_and_only_the_knobs_that_applied():
    exported = json.loads(results_json(SETTINGS, [fake_result([1, 2]), fake_result([3], strategy="sampling")]))
    machine = exported["machine"]
    assert machine["cores"] >= 1 and machine["memory_bytes"] > 0 and machine["devices"]
    greedy, sampling = (r["spec"] for r in exported["results"])
    assert "temperature" not in greedy and "num_beams" not in greedy and "window" not in greedy
    assert sampling["temperature"] == 1.0 and "top_p" in sampling and "num_beams" not in sampling
    assert exported["settings"]["prompt"] == SETTINGS["prompt"]


# chat


def test_chat_history_keeps_each_columns_own_replies():
    conversation = record_turn([], "hi", {0: "hello", 1: "hey"})
    conversation = record_turn(conversation, "how are you?", {0: "fine"})
    assert history(conversation, 0) == [("hi", "hello"), ("how are you?", "fine")]
    assert history(conversation, 1) == [("hi", "hey")]
    assert messages(conversation, 1, "next", "partial")[-2:] == [{"role": "user", "content": "next"},
                                                                  {"role": "assistant", "content": "partial"}]
    assert record_turn(conversation, "x", {}) == conversation


# the page itself, driven without a browser


@pytest.fixture(scope="module")
def ui():
    from playground.ui.wiring import build_ui

    return build_ui()  # (the Blocks, its Page)


@pytest.fixture(scope="module")
def demo(ui):
    return ui[0]


@pytest.fixture(scope="module")
def page(ui):
    return ui[1]


def test_page_has_the_element_ids_scripts_rely_on(demo):
    ids = {block.elem_id for block in demo.blocks.values() if getattr(block, "elem_id", None)}
    assert {"prompt", "run", "metrics", "add-column", "stop", "output-0", "output-1", "output-2", "output-3"} <= ids
    assert "run" in {d.api_name for d in demo.fns.values()}


def page_data(page, changes: dict[Any, Any] | None = None) -> dict[Any, Any]:
    """The values the page would send: every component's current default, changed where asked."""
    data = {page.prompt: "Hello", page.seed: 3, page.repeats: 1, page.mode: "raw",
            page.visible: [True, True, False, False],
            page.conversation: [], page.colour_by: "probability (as drawn)"}
    for col in page.columns:
        for component in col.knobs.values():
            data[component] = component.value
    data.update(changes or {})
    return data


def test_run_all_runs_columns_in_turn_streams_text_and_fills_the_table(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run

    calls = []

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        calls.append((prompt, spec.seed, spec.chat, spec.strategy))
        yield ProgressEvent(0.5, "loading")
        yield TextEvent("t1", "t1", 1)
        yield DoneEvent(fake_result([1, 2], speed=10 * len(calls), strategy=spec.strategy))

    monkeypatch.setattr(runner, "run", fake_run)
    col1 = page.columns[1]
    data = page_data(page, {col1.knobs["strategy"]: "sampling"})
    request = type("Request", (), {"session_hash": "test-session"})()
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    assert calls == [("Hello", 3, False, "greedy"), ("Hello", 3, False, "sampling")]
    assert updates[0][col1.notice] == "waiting: column 2 waits for column 1"
    loading = next(u for u in updates if u.get(page.columns[0].notice) == "◔ loading")
    assert loading[page.status].startswith("◔ **Column 1:** loading")  # by Run, not only on the card below
    assert any(u.get(page.columns[0].output) == "t1" for u in updates)  # streamed before the end
    table = next(u[page.metrics] for u in reversed(updates) if page.metrics in u)
    assert row(table, "decode speed") == ["10.0", "**★ 20.0**"]
    assert updates[-1][page.status].startswith("✓ 2 columns ran")


def test_a_beam_column_shows_its_leading_beam_until_the_result_replaces_it(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        yield HypothesisEvent("The sky", 2)
        yield DoneEvent(fake_result([1, 2], strategy="beam"))

    monkeypatch.setattr(runner, "run", fake_run)
    col = page.columns[0]
    data = page_data(page, {col.knobs["strategy"]: "beam", page.visible: [True] + [False] * (MAX_COLUMNS - 1)})
    request = type("Request", (), {"session_hash": "beam-preview"})()
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    preview = next(u for u in updates if u.get(col.output) == "The sky")
    assert "leading beam after 2 tokens" in preview[col.notice] and "may change" in preview[col.notice]
    assert [u[col.output] for u in updates if col.output in u][-1] != "The sky"  # the result replaced it


def test_repeated_timing_interleaves_the_columns_and_reports_medians_with_ranges(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run

    order = []

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        order.append(spec.strategy)
        yield TextEvent("t1", "t1", 1)
        yield DoneEvent(fake_result([1, 2], speed=10.0 * len(order), strategy=spec.strategy))

    monkeypatch.setattr(runner, "run", fake_run)
    col1 = page.columns[1]
    data = page_data(page, {col1.knobs["strategy"]: "sampling", page.repeats: 3})
    request = type("Request", (), {"session_hash": "repeat-session"})()
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    assert order == ["greedy", "sampling"] * 3  # round by round, not column by column
    assert sum(1 for u in updates if u.get(page.columns[0].output) == "t1") == 1  # only the first round streams
    table = next(u[page.metrics] for u in reversed(updates) if page.metrics in u)
    assert row(table, "decode speed") == ["30.0 (10.0–50.0)", "40.0 (20.0–60.0)"]  # within the spread: no star
    assert "3 of 3 timed runs" in [u[page.columns[1].notice] for u in updates if page.columns[1].notice in u][-1]


def test_streamed_text_is_coalesced_so_updates_do_not_steal_the_cores(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run


    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        text = ""
        for i in range(50):  # 50 tokens arriving faster than STREAM_INTERVAL_S
            text += "x"
            yield TextEvent("x", text, i + 1)
        yield DoneEvent(fake_result(list(range(50))))

    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(ui_run, "STREAM_INTERVAL_S", 60.0)
    data = page_data(page, {page.columns[1].knobs["strategy"]: "sampling"})
    request = type("Request", (), {"session_hash": "coalesce-session"})()
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    streamed = [u[page.columns[0].output] for u in updates if page.columns[0].output in u]
    assert streamed[1] == "x"  # the first token shows at once (after the column is cleared)...
    assert len(streamed) == 3  # ...then nothing until the final text
    assert streamed[-1] == fake_result(list(range(50)))["text"]


def test_stop_before_a_column_skips_it(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run

    request = type("Request", (), {"session_hash": "stop-session"})()

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        ui_run.stop_flag(request).set()  # the user presses stop during column 1
        yield DoneEvent(fake_result([1]))

    monkeypatch.setattr(runner, "run", fake_run)
    updates = list(ui_run.run_all(page, page_data(page), request, lambda *a, **k: None))
    assert any(u.get(page.columns[1].notice) == "■ not run (stopped)" for u in updates)
    assert "1 column ran, 1 not run (stopped)" in updates[-1][page.status]


def test_stop_during_a_compile_says_the_column_stops_once_the_compile_ends(page, monkeypatch):
    from playground import runner
    from playground.events import ProgressEvent
    from playground.ui import run as ui_run

    request = type("Request", (), {"session_hash": "stop-compile-session"})()

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        yield ProgressEvent(0.0, "compiling the JAX programs")
        ui_run.stop_flag(request).set()  # Stop pressed while XLA compiles: the runner ticks the stage's age
        yield ProgressEvent(0.0, "compiling the JAX programs", elapsed_s=12.4)
        yield DoneEvent(fake_result([1]))

    monkeypatch.setattr(runner, "run", fake_run)
    updates = list(ui_run.run_all(page, page_data(page), request, lambda *a, **k: None))
    notices = [u[page.columns[0].notice] for u in updates if page.columns[0].notice in u]
    assert "◔ compiling the JAX programs" in notices
    assert "■ stops once this ends: compiling the JAX programs · 12 s so far" in notices


def test_a_run_stopped_while_compiling_says_the_compile_goes_on_in_the_background(page, monkeypatch):
    from playground import runner
    from playground.events import ProgressEvent
    from playground.ui import run as ui_run

    request = type("Request", (), {"session_hash": "stopped-compiling-session"})()
    stopped = fake_result([])
    stopped["stopped"], stopped["extra"] = True, {"stopped_while_compiling": True}
    stopped["metrics"] |= {"compile_s": 7.6, "ttft_s": None, "tokens_per_s": None}

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        yield ProgressEvent(0.0, "compiling the JAX programs")
        ui_run.stop_flag(request).set()  # the JAX path stops waiting for its compile at once
        yield DoneEvent(stopped)

    monkeypatch.setattr(runner, "run", fake_run)
    updates = list(ui_run.run_all(page, page_data(page), request, lambda *a, **k: None))
    notices = [u[page.columns[0].notice] for u in updates if page.columns[0].notice in u]
    assert notices[-1].startswith("■ stopped while compiling, after 8 s: the compile goes on in the background")


def test_colour_toggle_redraws_only_the_token_views(page):
    from playground.ui.outcome import empty_outcome
    from playground.ui.run import recolour

    outcome = empty_outcome({"columns": [{"strategy": "greedy"}]}, [0])
    outcome["results"][0] = fake_result([1, 2])
    updates = recolour(page, outcome, "entropy (as drawn)")
    assert set(updates) == {page.legend, page.columns[0].tokens}
    assert "nats" in updates[page.legend] and "class='tok'" in updates[page.columns[0].tokens]


def test_applying_settings_sets_every_column_and_its_visible_knobs(page):
    updates = page.apply_settings(SETTINGS, "applied")
    assert updates[page.visible] == [True, True, False, False]
    assert updates[page.prompt] == SETTINGS["prompt"] and updates[page.mode] == "raw"
    second = page.columns[1]
    assert updates[second.knobs["strategy"]]["value"] == "sampling"
    assert updates[second.knobs["temperature"]]["value"] == 0.7
    assert updates[second.groups["sampling_knobs"]]["visible"] is True
    assert updates[second.groups["beam_knobs"]]["visible"] is False
    assert decode_url_state(updates[page.url_token])["columns"][1]["top_p"] == 0.9


def test_a_failing_column_does_not_cost_the_others_their_run(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run

    request = type("Request", (), {"session_hash": "crash-session"})()

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        if spec.strategy == "greedy":
            raise RuntimeError("backend broke")
        yield DoneEvent(fake_result([1]))

    monkeypatch.setattr(runner, "run", fake_run)
    data = page_data(page, {page.columns[1].knobs["strategy"]: "sampling"})
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    assert any("RuntimeError: backend broke" in u.get(page.columns[0].notice, "") for u in updates)
    assert any(u.get(page.columns[1].notice, "").startswith("✓ 1 token ·") for u in updates)


def test_removing_a_column_takes_its_results_out_and_renumbers_the_rest(page):
    from playground.ui.outcome import empty_outcome
    from playground.ui.wiring import remove_column

    outcome = empty_outcome({"columns": [{"strategy": "greedy"}, {"strategy": "sampling"}, {"strategy": "beam"}]},
                            [0, 1, 2])
    for slot, ids in ((0, [1, 2]), (1, [1, 3]), (2, [4])):
        outcome["results"][slot] = fake_result(ids)
    updates = remove_column(page, [True, True, True, False], outcome, "probability (as drawn)", 0)
    remaining = updates[page.results]
    assert remaining["results"][0] is None and remaining["labels"][0] is None
    assert remaining["labels"][1:3] == ["1: sampling · dynamic", "2: beam · dynamic"]
    assert updates[page.metrics]["headers"] == ["metric", "1: sampling · dynamic", "2: beam · dynamic"]
    assert "greedy" not in updates[page.diff]
    assert updates[page.columns[1].title]["value"] == "### Column 1"
    assert updates[page.columns[2].title]["value"] == "### Column 2"
    # the plots and the cards agree on each column's number and colour once it moved up
    assert "tint-0" in updates[page.columns[1].title]["elem_classes"]
    assert "tint-1" in updates[page.columns[2].output_box]["elem_classes"]
    assert updates[page.columns[0].tokens] == "" and updates[page.columns[0].chatbot] == []  # re-added: blank
    kv = updates[page.kv_plot]["value"].dropna()
    assert set(kv["column"]) == {"col 1", "col 2"} and set(kv[kv["column"] == "col 1"]["run"]) == {
        "1: sampling · dynamic"}


def test_a_column_added_before_others_renumbers_them_and_their_results(page):
    from playground.ui.outcome import empty_outcome
    from playground.ui.wiring import add_column

    outcome = empty_outcome({"columns": [{"strategy": "sampling"}, {"strategy": "beam"}]}, [1, 2])
    outcome["results"][1], outcome["results"][2] = fake_result([1, 3]), fake_result([4])
    updates = add_column(page, [False, True, True, False], outcome, "probability (as drawn)")
    assert updates[page.visible] == [True, True, True, False]
    assert updates[page.columns[0].title]["value"] == "### Column 1"
    assert updates[page.results]["labels"][1:3] == ["2: sampling · dynamic", "3: beam · dynamic"]
    assert updates[page.metrics]["headers"] == ["metric", "2: sampling · dynamic", "3: beam · dynamic"]
    speed = updates[page.speed_plot]["value"]
    assert set(speed[speed["tokens/s"] > 0]["column"]) == {"col 2", "col 3"}


def test_run_says_how_many_columns_can_run(page):
    assert page.run_label([True, True, False, False], "", "", "", "")["value"] == "▶ Run all 2 columns"
    label = page.run_label([True, True, True, False], "", "⚠ unknown model 'x'", "", "")["value"]
    assert label == "▶ Run 2 of 3 columns (1 cannot run as set)"


def wired(demo, name: str):
    """The page's handler of that name, as Gradio calls it."""
    return next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == name)


def test_a_refusal_from_the_last_run_clears_as_soon_as_a_prompt_is_typed(demo, page):
    refused = "⚠ prompt is empty; type some text to continue"
    summary = "⚠ 0 columns ran, 2 refused or failed (column 1: prompt is empty; column 2: prompt is empty)"
    data = page_data(page, {page.prompt: "Once", page.columns[0].notice: refused, page.status: summary,
                            page.columns[1].notice: refused, page.columns[2].notice: "", page.columns[3].notice: ""})
    updates = wired(demo, "recheck")(data)
    assert updates[page.columns[0].notice] == updates[page.columns[1].notice] == ""
    assert updates[page.run]["value"] == "▶ Run all 2 columns"
    assert updates[page.status] == ""  # the summary of the refusals goes with them


def test_the_run_button_counts_the_columns_left_after_a_remove_or_an_add(demo, page):
    from playground.ui.outcome import empty_outcome

    outcome = empty_outcome()
    updates = wired(demo, "remove")([True, True, False, False], outcome, "probability (as drawn)", "", "", "", "")
    assert updates[page.run]["value"] == "▶ Run"
    add = wired(demo, "add")
    updates = add([True, True, False, False], outcome, "probability (as drawn)", "", "", "", "")
    assert updates[page.run]["value"] == "▶ Run all 3 columns"


def test_every_control_is_locked_while_columns_run(page):
    lockable = page.lockable()
    assert page.prompt in lockable and page.columns[3].knobs["temperature"] in lockable and page.run not in lockable
    assert page.stop not in lockable  # stopping stays possible


def test_stop_is_red_only_while_columns_run(demo, page):
    assert page.stop.variant == "secondary"
    assert wired(demo, "lock")()[page.stop]["variant"] == "stop"
    assert wired(demo, "unlock")()[page.stop]["variant"] == "secondary"


def test_no_glyph_the_pages_fonts_lack():
    """Debian's Chromium draws U+23F3 (hourglass) as an empty box: no installed font has it."""
    from pathlib import Path

    import playground

    for path in Path(playground.__file__).parent.rglob("*.py"):
        assert "\u23f3" not in path.read_text(), path


@pytest.mark.parametrize(("settings", "fragment"), [
    ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
    ({"model": "org/some-model"}, "cannot reach the Hugging Face hub"),
    ({"strategy": "assisted", "assistant": "/etc"}, "outside the allowed roots"),
])
def test_a_column_shows_what_would_refuse_it_before_anything_runs(settings, fragment):
    assert fragment in notice_text({"model": "smollm2-135m", **settings})


def test_a_beam_column_shows_every_returned_sequence_and_the_search_tree():
    from playground.ui.beam_view import beam_html

    node = {"parent": None, "token": 1, "text": " a", "score": -1.0, "kept": True, "finished": False, "chosen": True}
    child = {**node, "parent": 0, "text": "<b>", "score": -2.5, "chosen": False, "kept": False}
    result = {**fake_result([1, 2]), "sequences": ["best", "second"], "scores": [-1.25, -1.5],
              "beam_tree": [[node, {**node, "chosen": False, "kept": False}], [child, {**child, "chosen": True}]]}
    view = beam_html(result)
    assert "<b>-1.250</b> best" in view and "<b>-1.500</b> second" in view
    assert view.count("beam-node chosen") == 2 and view.count("beam-edge") == 2
    assert "&lt;b&gt;" in view  # token text is escaped
    assert beam_html(fake_result([1])) == ""  # not a beam run: nothing drawn


def test_applied_settings_keep_the_values_of_knobs_that_are_their_own_group(page):
    columns = [{"strategy": "assisted", "prompt_lookup": 3}, {"strategy": "greedy", "cache": "sink", "sink_tokens": 2}]
    updates = page.apply_settings(page_settings("p", 0, "auto", columns), "applied")
    lookup = updates[page.columns[0].knobs["prompt_lookup"]]
    assert lookup["value"] == 3 and lookup["visible"] is True
    assert updates[page.columns[1].knobs["sink_tokens"]]["value"] == 2


def test_the_beam_tree_leaves_out_beams_no_hypothesis_can_reach():
    """A constraint that allows fewer continuations than beams keeps some beams running at transformers' start
    score (-1e9); they and what descends from them are not hypotheses, and the rest keep their parents' rows."""
    from playground.ui.beam_view import _possible

    def node(parent, text, score, kept=True, chosen=False):
        return {"parent": parent, "token": 0, "text": text, "score": score, "kept": kept, "finished": False,
                "chosen": chosen}

    steps = [[node(None, "{", -3.3, chosen=True), node(None, "{", -1e9 - 3.3)],
             [node(1, "x", -1e9 - 4.0), node(0, '"', -3.7, chosen=True), node(0, " ", -5.1, kept=False)],
             [node(0, "y", -1e9 - 5.0), node(1, "n", -3.8, chosen=True)]]
    shown = _possible(steps)
    assert [[n["text"] for n, _ in step] for step in shown] == [["{"], ['"', " "], ["n"]]
    assert [[parent for _, parent in step] for step in shown] == [[None], [0, 0], [0]]


def test_a_compile_reported_at_zero_shows_what_it_is_doing_and_for_how_long_not_a_percentage():
    from playground.ui.run import progress_shown

    compiling = ProgressEvent(0.0, "torch.compile (default): compiling the decode step for 160 cache positions",
                              elapsed_s=138.4)
    fraction, desc, mark = progress_shown(compiling, stopping=False)
    assert fraction is None and mark == "◔"  # no bar stuck at "0.0%" for minutes
    assert desc == "torch.compile (default): compiling the decode step for 160 cache positions · 138 s"
    assert progress_shown(ProgressEvent(0.4, "loading weights", elapsed_s=3.0), stopping=False)[0] == 0.4
    assert progress_shown(compiling, stopping=True)[1].startswith("stops once this ends: torch.compile")


def test_chain_knobs_sit_two_to_a_row_only_where_the_card_is_wide_enough():
    """A row's widgets wrap under each other below their minimum width: three columns on a 1400 px screen gave
    the "more samplers" help ten lines per knob at half a card's width."""
    from playground import registry
    from playground.ui.knob_widgets import WIDGET_MIN_WIDTH, knob_widget

    widget = knob_widget(registry.knob("typical_p"), 0, 1.0)
    assert widget.min_width == WIDGET_MIN_WIDTH >= 240

"""What the page draws from finished results: the metrics table and its stars, the plots' frames, token colours
and the divergence report."""

from __future__ import annotations

import pytest

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
from tests.unit.page_fakes import fake_result, row

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

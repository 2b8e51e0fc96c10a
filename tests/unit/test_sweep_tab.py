"""The page's sweep tab: its curves, scatter and table from a sweep's rows, which row a clicked point opens, the
presets' requests, and a run through the tab's handler on a tiny model (rows drawn, Stop keeps them)."""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd
import pytest

from playground.errors import PlaygroundError
from playground.sweep.presets import SWEEP_PRESETS
from playground.ui import sweep_running, sweep_tab
from playground.ui.run import stop_flag
from playground.ui.sweep_frames import (
    MEASURES,
    SCATTER_SPEED,
    aggregate_table,
    clicked_row,
    measure_frame,
    padded_limits,
    quality_measure,
    row_label,
    scatter_frame,
    shown,
)
from tests.helpers import allowed_tiny_model


def _row(value: float, prompt: int, agreement: float, speed: float, seed: int = 0) -> dict[str, Any]:
    return {"value": value, "prompt_index": prompt, "seed": seed, "text": f"p{prompt} v{value}",
            "metrics": {"tokens_per_s": speed, "kv_cache_bytes": 2**20 * value, "compile_s": 0.0, "ttft_s": 0.1,
                        "acceptance_rate": None},
            "token_ids": [prompt, 1, 2],
            "measures": {"agreement": agreement, "distinct_2": 1.0, "repeat_4gram_rate": 0.0, "mean_logprob": -1.0,
                         "tokens_per_pass": 1.0, "first_divergence": None, "distinct_1": 1.0}}


SWEEP = {"knob": "window", "values": [16, 64],
         "rows": [_row(16, 0, 0.2, 30.0), _row(16, 1, 0.6, 32.0), _row(16, 2, 0.4, 34.0),
                  _row(64, 0, 1.0, 29.0), _row(64, 1, 0.9, 31.0), _row(64, 2, 1.0, 30.0)]}
AGREEMENT = next(i for i, m in enumerate(MEASURES) if m.key == "agreement")


def test_a_curve_is_each_values_median_lowest_and_highest_with_undrawn_placeholders():
    frame = measure_frame(SWEEP, MEASURES[AGREEMENT])
    drawn = frame.dropna()
    label = MEASURES[AGREEMENT].title
    assert len(drawn) == 3 * len(SWEEP["values"])  # one point per value in each series
    by = {(r["window"], r["series"]): r[label] for _, r in drawn.iterrows()}
    assert by[(16, "median")] == pytest.approx(0.4) and by[(16, "lowest")] == 0.2 and by[(16, "highest")] == 0.6
    assert by[(64, "median")] == 1.0 and by[(64, "lowest")] == 0.9
    assert frame[label].isna().sum() == 3  # every series named before its first row, so its colour is fixed
    kv = measure_frame(SWEEP, next(m for m in MEASURES if m.key == "kv_cache_mib")).dropna()
    assert sorted(kv[kv["series"] == "median"]["KV cache (MiB)"]) == [16.0, 64.0]


def test_the_scatter_has_a_point_per_value_that_opens_its_median_row():
    frame = scatter_frame(SWEEP)
    assert list(frame["window"]) == ["16", "64"]
    assert list(frame[SCATTER_SPEED]) == [32.0, 30.0]
    assert quality_measure("window").key == "agreement" and quality_measure("temperature").key == "distinct_2"
    assert list(frame["row"]) == [2, 3]  # the rows whose agreement is nearest each value's median
    assert scatter_frame({**SWEEP, "rows": []}).empty


def test_the_scatter_axes_reach_past_the_extreme_points():
    frame = scatter_frame(SWEEP)
    low, high = padded_limits(frame[SCATTER_SPEED])
    assert low < 30.0 and high > 32.0 and high - 32.0 == pytest.approx(30.0 - low)
    low, high = padded_limits(pd.Series([1.0, 1.0]))  # one value: still a margin either side
    assert low < 1.0 < high
    assert padded_limits(pd.Series([], dtype="float64")) is None
    assert padded_limits(pd.Series([0.0, 0.0]), above_zero=True)[0] == 0.0  # a share stays off negative ticks
    assert padded_limits(pd.Series([-2.0, -1.0]), above_zero=True)[0] < -2.0  # a log-probability does not


def test_a_clicked_mark_names_its_row():
    label = MEASURES[AGREEMENT].title
    assert clicked_row(SWEEP, len(MEASURES), f"{SCATTER_SPEED}: 30; {label}: 1; window: 64; row: 3") == 3
    assert clicked_row(SWEEP, AGREEMENT, f"window: 16; {label}: 0.6; series: highest") == 1
    assert clicked_row(SWEEP, AGREEMENT, f"window: 16; {label}: 0.2; series: lowest") == 0
    assert clicked_row(SWEEP, AGREEMENT, f"window: 64; {label}: 1; series: median") in (3, 5)
    assert clicked_row(SWEEP, AGREEMENT, f"window: 1,024; {label}: 1; series: median") in (3, 5)  # nearest value
    assert clicked_row(SWEEP, AGREEMENT, "X-axis titled 'window'") is None
    assert clicked_row(SWEEP, len(MEASURES), "row: 99") is None and clicked_row(None, 0, "row: 1") is None


def test_axis_titles_are_short_and_the_labels_say_what_each_plot_is():
    """Vega cuts an axis title longer than 0.8 of the plot's height (260 px: about 28 characters at 12 px), so the
    titles are short and the plot's label above it says the rest."""
    assert all(len(m.title) <= 20 for m in MEASURES) and len(SCATTER_SPEED) <= 20
    assert len({m.title for m in MEASURES}) == len(MEASURES) and not any(":" in m.title for m in MEASURES)
    agreement = MEASURES[AGREEMENT]
    assert agreement.label == "tokens equal to greedy before the first difference (share)"


@pytest.mark.parametrize(("knob", "strategy", "hidden"), [
    # a sampled run agrees with greedy by chance only: its agreement plot would lie flat near 0
    ("temperature", "sampling", {"agreement", "kv_cache_mib", "tokens_per_pass", "returned_overlap"}),
    ("top_p", "sampling", {"agreement", "kv_cache_mib", "tokens_per_pass", "returned_overlap"}),
    ("dry_multiplier", "sampling", {"agreement", "kv_cache_mib", "tokens_per_pass", "returned_overlap"}),
    ("dry_multiplier", "greedy", {"kv_cache_mib", "tokens_per_pass", "returned_overlap"}),
    ("window", "greedy", {"tokens_per_pass", "returned_overlap"}),
    ("cache_bits", "greedy", {"tokens_per_pass", "returned_overlap"}),
    ("prompt_lookup", "assisted", {"kv_cache_mib", "returned_overlap"}),
    ("num_beams", "beam", set()),
    ("diversity_penalty", "diverse_beam", {"kv_cache_mib"}),
])
def test_a_sweep_shows_only_the_plots_its_knob_can_move(tab, knob, strategy, hidden):
    assert {m.key for m, show in zip(MEASURES, shown(knob, strategy), strict=True) if not show} == hidden
    empty = sweep_tab.empty_sweep(knob, (1, 2))
    setup = sweep_running.plot_setup(tab, empty, strategy)
    visible = {m.key for plot, m in zip(tab.plots, MEASURES, strict=False) if setup[plot]["visible"]}
    assert visible == {m.key for m in MEASURES} - hidden
    assert "visible" not in setup[tab.plots[-1]]  # the scatter always shows
    assert set(sweep_running.plot_updates(tab, empty)[tab.plots[0]]) == {"__type__", "value"}  # a batch: data only


def test_before_a_run_the_tab_shows_a_sentence_not_empty_axes(tab):
    """No plot with a lone "0.200000" tick and no table headed "1 2 3" before a sweep: a sentence instead."""
    assert tab.results.visible is False  # the plots, the table and the row list
    assert tab.empty_note.visible is not False and tab.empty_note.value.startswith("Run a sweep to see")
    assert tab.table.value["headers"][:3] == ["temperature", "rows", "tokens/s"]  # named, should it ever show


def test_the_table_has_a_line_per_value_with_units():
    from playground.sweep.run import aggregates

    table = aggregate_table({**SWEEP, "aggregates": aggregates(SWEEP["values"], SWEEP["rows"])})
    assert list(table["window"]) == ["16", "64"] and list(table["KV (MiB)"]) == [16.0, 64.0]
    assert list(table["rows"]) == [3, 3] and row_label(SWEEP, 4) == "window=64 · prompt 2 · seed 0"


@pytest.fixture(scope="module")
def wired() -> tuple[sweep_tab.SweepTab, gr.Blocks]:
    from playground.ui.sweep_wiring import wire

    with gr.Blocks() as demo:
        built = sweep_tab.build_sweep_tab()
        wire(built)
    return built, demo


@pytest.fixture(scope="module")
def tab(wired) -> sweep_tab.SweepTab:
    return wired[0]


def _data(tab: sweep_tab.SweepTab, **changes: Any) -> dict[Any, Any]:
    values = {"prompt_set": "stories", "prompt_count": 2, "own_prompts": "", "knob": "temperature",
              "values": "0.5,1.0", "seeds": 1, "model": "smollm2-135m", "backend": "torch", "strategy": "sampling",
              "cache": "dynamic", "max_new_tokens": 8, "other": '{"chat": false}', **changes}
    return {getattr(tab, name): value for name, value in values.items()}


@pytest.mark.parametrize("name", list(SWEEP_PRESETS))
def test_every_preset_puts_a_runnable_sweep_on_the_tab(tab, name):
    updates = sweep_tab.apply_preset(tab, name)
    preset = SWEEP_PRESETS[name]
    data = {c: (u.get("value") if isinstance(u, dict) else u) for c, u in updates.items() if c in tab.inputs()}
    data[tab.own_prompts] = ""
    sweep = tab.request(data)
    specs = sweep.checked_specs()  # valid for every value, under the token cap
    assert sweep.knob == preset.knob and len(specs) == len(preset.values.split(","))
    assert len(sweep.prompts) == preset.prompt_count and all(getattr(s, preset.knob) in sweep.values for s in specs)
    assert preset.note in updates[tab.preset_note]
    bench_sweep = preset.sweep()  # what `bench --suite sweeps` runs is what the page runs
    assert bench_sweep.checked_specs() == specs and bench_sweep.prompts == sweep.prompts


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"other": "{window: 3"}, "not valid JSON"), ({"other": "[1]"}, "JSON object"),
    ({"prompt_set": sweep_tab.OWN_PROMPTS, "own_prompts": "  \n"}, "no prompts given"),
    ({"values": "0.5,x"}, "numbers separated by commas"), ({"other": '{"windoww": 3}'}, "windoww")])
def test_bad_input_is_refused_with_the_reason(tab, changes, fragment):
    with pytest.raises(PlaygroundError, match=fragment):
        tab.request(_data(tab, **changes)).checked_specs()


class _Request:
    session_hash = "sweep-tab-test"


@pytest.fixture
def model(monkeypatch, tmp_path):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        yield path


def test_the_tab_runs_a_sweep_draws_its_rows_and_a_stop_keeps_them(wired, model, monkeypatch):
    tab, demo = wired
    monkeypatch.setattr(sweep_running, "DRAW_INTERVAL_S", 0.0)
    updates = list(sweep_running.run_sweep_tab(tab, _data(tab, model=model), _Request(), lambda *a, **k: None))
    # Gradio refuses an update to a component the event does not list as an output (the whole run fails)
    outputs = next(f.outputs for f in demo.fns.values() if f.name == "run_sweep_on_page")
    assert {c for u in updates for c in u} <= set(outputs)
    start, limits = updates[0], updates[-1]
    final = next(u for u in reversed(updates) if tab.status in u and "sweep done" in u[tab.status])
    kept = final[tab.state]
    assert "✓ sweep done: 4 rows over 2 values" in final[tab.status]
    assert len(kept["tokens"]) == len(kept["sweep"]["rows"]) == 4
    assert final[tab.row_choice]["value"] == row_label(kept["sweep"], 0)
    # a sentence until the first row; the first batch of rows shows the plots (a temperature sweep: four of eight)
    assert start[tab.results]["visible"] is False and "first run finishes" in start[tab.empty_note]["value"]
    assert [start[p]["visible"] for p in tab.plots[:-1]] == [True, True, True, True, False, False, False, False]
    assert start[tab.plots[0]]["x_lim"][1] > 1.0  # the knob's axis spans its values before any row
    batches = [u for u in updates[1:] if tab.plots[0] in u and u is not limits]
    assert batches[0][tab.results]["visible"] is True and batches[0][tab.empty_note]["visible"] is False
    assert any(not u[tab.plots[0]]["value"].dropna().empty for u in batches)
    # rows change only data: Gradio redraws a plot whose limits, legend or axes change, and data sent during that
    # redraw is lost; the finish's limits come alone, after its data, so their redraw draws the final rows
    assert all(set(u[p]) == {"__type__", "value"} for u in batches for p in tab.plots)
    assert final is updates[-2] and set(limits) == set(tab.plots)
    assert all(set(limits[p]) == {"__type__", "y_lim"} for p in tab.plots[:-1])
    assert set(limits[tab.plots[-1]]) == {"__type__", "x_lim", "y_lim"}
    drawn = [p for p, show in zip(tab.plots, shown("temperature", "sampling"), strict=False) if show]
    assert limits[tab.plots[-1]]["x_lim"] and all(limits[p]["y_lim"] for p in [*drawn, tab.plots[-1]])
    drawn = final[tab.plots[0]]["value"].dropna()
    assert sorted(set(drawn["temperature"])) == [0.5, 1.0] and len(drawn) == 3 * 2  # the final rows, all values
    picked = sweep_tab.choose_row(tab, kept, row_label(kept["sweep"], 3))
    assert "prompt 2" in picked[tab.tokens] and "data-pos='0'" in picked[tab.tokens]

    # Stop once the first row is drawn: the finish keeps the rows that finished
    runs = sweep_running.run_sweep_tab(tab, _data(tab, model=model, values="0.5,0.7,0.9"), _Request(),
                                       lambda *a, **k: None)
    last: dict[Any, Any] = {}
    for update in runs:
        if tab.status in update:
            last = update
        if tab.plots[0] in update and not update[tab.plots[0]].get("value", pd.DataFrame()).dropna().empty:
            stop_flag(_Request()).set()
    assert "■ stopped: kept the" in last[tab.status]
    rows = last[tab.state]["sweep"]["rows"]
    assert 1 <= len(rows) < 6 and all(r["value"] == 0.5 for r in rows[:2])


def test_a_sweep_stopped_before_its_first_row_says_so_instead_of_drawing(tab, model):
    runs = sweep_running.run_sweep_tab(tab, _data(tab, model=model), _Request(), lambda *a, **k: None)
    start = next(runs)
    assert start[tab.results]["visible"] is False
    stop_flag(_Request()).set()  # before the worker starts: no run begins
    rest = list(runs)
    final = rest[-1]  # no limits follow: there is nothing to fit them to
    assert "■ stopped: kept the 0 rows" in final[tab.status]
    assert final[tab.results]["visible"] is False and "nothing to draw" in final[tab.empty_note]["value"]


def test_the_tab_leaves_the_public_endpoints_as_named():
    """Gradio names endpoints after handler functions, private ones too: a tab handler called `run` once pushed
    the public /run to /run_1."""
    from playground.ui.wiring import build_ui

    demo, _ = build_ui()
    assert sorted(demo.get_api_info()["named_endpoints"]) == ["/chain", "/run", "/sweep"]


def test_the_knobs_axis_starts_before_its_first_value_so_no_label_is_pushed_into_the_next(tab):
    """Vega moves a label that sits on the axis' very end inward: a DRY sweep from 0 drew "0.00.2"."""
    empty = sweep_tab.empty_sweep("dry_multiplier", (0.0, 0.4, 0.8, 1.6))
    low, high = sweep_running.plot_setup(tab, empty, "sampling")[tab.plots[0]]["x_lim"]
    assert -0.2 < low < 0.0 and high > 1.6


def test_the_page_guide_lists_every_sweep_preset():
    from pathlib import Path

    from playground.sweep.presets import SWEEP_PRESETS

    text = Path(__file__).parents[2].joinpath("docs", "page.md").read_text(encoding="utf-8")
    listed = text.split("- **Presets** fill the tab", 1)[1].split("\n- **", 1)[0]
    assert listed.count("\n  - ") == len(SWEEP_PRESETS)


def test_a_sweep_of_the_cache_store_draws_its_names_as_categories_and_clicks_open_their_rows():
    from playground.sweep.knobs import parse_values
    from playground.ui.sweep_frames import clicked_row

    assert parse_values("cache_dtype", "fp32, bf16") == ("fp32", "bf16")
    with pytest.raises(PlaygroundError, match="cache_dtype values fp16 are not among its choices: fp32, bf16"):
        parse_values("cache_dtype", "fp32,fp16")
    named = {"knob": "cache_dtype", "values": ["fp32", "bf16"],
             "rows": [{**row, "value": "fp32" if row["value"] == 16 else "bf16"} for row in SWEEP["rows"]]}
    frame = measure_frame(named, MEASURES[AGREEMENT]).dropna()
    medians = frame[frame["series"] == "median"]
    assert dict(zip(medians["cache_dtype"], medians[MEASURES[AGREEMENT].title], strict=True)) == {
        "fp32": pytest.approx(0.4), "bf16": 1.0}
    assert set(scatter_frame(named)["cache_dtype"]) == {"fp32", "bf16"}
    assert clicked_row(named, AGREEMENT, "cache_dtype: bf16; agreed prefix: 1; series: lowest") == 4

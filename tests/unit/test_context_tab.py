"""The page's Context tab: the plots' data and tables from the context command's JSON, the preset's plan, the
refusals before anything runs, and runs through the tab's handler on a tiny model (drawn as each finishes, inside
the one generation slot, Stop keeps what finished)."""

from __future__ import annotations

import math
import re
import threading
import time
from pathlib import Path
from typing import Any

import gradio as gr
import pytest

from playground import registry, runner
from playground.context import speed as context_speed
from playground.errors import PlaygroundError
from playground.ui import context_running, context_tab
from playground.ui.context_frames import (
    CONTEXT,
    KL,
    MEMORY,
    POSITION,
    QUALITY_COLUMNS,
    ROOFLINE,
    SPEED,
    SPEED_COLUMNS,
    TOP1,
    colours,
    frames,
    legend_html,
    legend_name,
    lighter,
    load_note,
    measured,
    quality_table,
    series_name,
    speed_table,
)
from playground.ui.presets import CONTEXT_PRESETS
from playground.ui.run import stop_flag
from tests.helpers import allowed_tiny_model

MIB = 2**20


def _result(cache: str, backend: str, knobs: dict[str, Any], kv: list[int], kl: list[float]) -> dict[str, Any]:
    """A context command's JSON object with speed at 512 and 1024 tokens and quality in two buckets."""
    lengths = zip((512, 1024), kv, strict=True)
    speed = [{"context_tokens": length, "prefill_s": 0.5, "prefill_tokens_per_s": length / 0.5,
              "decode_tokens_per_s": 20.0 + i, "kv_bytes": bytes_, "peak_rss_bytes": 900 * MIB,
              "roofline_tokens_per_s": 40.0 - i} for i, (length, bytes_) in enumerate(lengths)]
    buckets = [{"start": 1, "end": 65, "ppl": 10.0, "kl_vs_full": kl[0], "top1_vs_full": 1.0},
               {"start": 65, "end": 129, "ppl": 12.0, "kl_vs_full": kl[1], "top1_vs_full": 0.75}]
    return {"model": "m", "backend": backend, "cache": cache, "cache_knobs": knobs, "speed": speed,
            "bandwidth_gbs": 20.0, "weight_bytes": 500 * MIB,
            "quality": {"tokens": 129, "ppl": 11.0, "kl_vs_full": sum(kl) / 2, "top1_vs_full": 0.875,
                        "buckets": buckets}}


STATIC = _result("static", "jax", {}, [16 * MIB, 32 * MIB], [0.0, 0.0])
SINK = _result("sink", "torch", {"window": 64, "sink_tokens": 4}, [4 * MIB, 4 * MIB], [0.0, 0.25])
SERIES = [legend_name(STATIC), legend_name(SINK)]


def test_a_run_is_named_by_its_cache_its_knobs_and_its_backend():
    assert [series_name(STATIC), series_name(SINK)] == ["static · jax", "sink (window 64, sink_tokens 4) · torch"]


def test_the_plots_name_a_run_by_its_cache_and_backend_and_their_tooltips_by_its_knobs_too():
    """A legend label past 160 px is cut ("sink (window 32, sink_tokens 4) · tor…"): the series is short."""
    assert SERIES == ["static · jax", "sink · torch"]
    for key, plot in frames([STATIC, SINK], SERIES).items():
        drawn = plot.dropna()
        runs = set(zip(drawn["series"], drawn["run"], strict=True))
        assert {(SERIES[1], "sink (window 64, sink_tokens 4) · torch"), (SERIES[0], "static · jax")} <= runs, key


def test_speed_is_drawn_against_the_context_with_each_runs_roofline_beside_it():
    speed = frames([STATIC, SINK], SERIES)["speed"].dropna()
    mine = speed[speed["series"] == SERIES[1]]
    roof = speed[speed["series"] == f"{SERIES[1]} {ROOFLINE}"]
    assert list(mine[CONTEXT]) == [512.0, 1024.0] and list(mine[SPEED]) == [20.0, 21.0]
    assert list(roof[CONTEXT]) == [512.0, 1024.0] and list(roof[SPEED]) == [40.0, 39.0]
    mapping = colours(SERIES)  # each run its colour, its roofline the same colour, lighter
    assert mapping[SERIES[0]] != mapping[SERIES[1]]
    assert all(mapping[f"{name} {ROOFLINE}"] == lighter(mapping[name]) != mapping[name] for name in SERIES)


def test_kv_memory_is_drawn_in_mib_against_the_context():
    memory = frames([STATIC, SINK], SERIES)["memory"].dropna()
    assert list(memory[memory["series"] == SERIES[0]][MEMORY]) == [16.0, 32.0]
    assert list(memory[memory["series"] == SERIES[1]][MEMORY]) == [4.0, 4.0]


def test_kl_and_top1_are_drawn_per_bucket_at_its_middle_position():
    drawn = frames([STATIC, SINK], SERIES)
    kl, top1 = drawn["kl"].dropna(), drawn["top1"].dropna()
    sink = kl[kl["series"] == SERIES[1]]
    assert list(sink[POSITION]) == [32.5, 96.5] and list(sink[KL]) == [0.0, 0.25]
    assert list(top1[top1["series"] == SERIES[0]][TOP1]) == [1.0, 0.75]


def test_every_series_is_named_before_it_has_data():
    """Gradio fixes a plot's colour domain when it first draws: the empty frames already name every series."""
    empty = frames([], SERIES)
    assert set(empty["speed"]["series"]) == {*SERIES, *(f"{s} {ROOFLINE}" for s in SERIES)}
    assert set(empty["kl"]["series"]) == set(SERIES) and empty["kl"][KL].isna().all()


def test_the_tables_give_the_numbers_with_units():
    speed = speed_table([STATIC, SINK])
    assert tuple(speed.columns) == SPEED_COLUMNS and len(speed) == 4
    first = speed.iloc[0]
    assert (first["run"], first["context (tokens)"], first["KV cache (MiB)"], first["of roofline (%)"]) == (
        "static · jax", 512, 16.0, 50.0)
    quality = quality_table([STATIC, SINK])
    assert tuple(quality.columns) == QUALITY_COLUMNS
    sink = quality[quality["run"] == series_name(SINK)]
    assert list(sink["positions"]) == ["1-64", "65-128", "all 128"]
    assert list(sink["KL(full ‖ cache) (nats)"]) == [0.0, 0.25, 0.125] and list(sink["top-1 agreement (%)"]) == [
        100.0, 75.0, 87.5]


def test_the_legend_names_each_finished_run_in_its_colour_and_wraps():
    shown = legend_html([STATIC, SINK], SERIES)
    assert "background:#4f46e5'></i>static · jax" in shown and "background:#ea580c'></i>sink · torch" in shown
    assert "roofline" in shown and legend_html([], SERIES) == ""
    quality_only = {k: v for k, v in SINK.items() if k != "speed"}
    assert "roofline" not in legend_html([quality_only], SERIES)
    assert measured([quality_only]) == {"speed": False, "quality": True}


def test_a_speed_measured_on_a_busy_machine_is_called_unreliable():
    """The Compare tab's busy-machine line, per run that measured speed: a bounded cache that seemed to speed up
    from 512 to 1024 tokens on a loaded machine is the load, not the cache."""
    busy = {"other_cpu_share": 0.6, "steal_share": 0.0, "cpus": 2, "busy": True}
    quiet = {**busy, "other_cpu_share": 0.05, "busy": False}
    note = load_note([{**STATIC, "machine_load": quiet}, {**SINK, "machine_load": busy}])
    assert note.count("⚠") == 1 and f"**{series_name(SINK)}** ran on a busy machine" in note
    assert series_name(STATIC) not in note and "unreliable under load" in note
    assert load_note([{**{k: v for k, v in SINK.items() if k != "speed"}, "machine_load": busy}]) == ""
    assert "flat" not in CONTEXT_PRESETS["Long document: which cache keeps up?"].note.split("speed too")[1][:80]


@pytest.fixture(scope="module")
def wired() -> tuple[context_tab.ContextTab, gr.Blocks]:
    with gr.Blocks() as demo:
        built = context_tab.build_context_tab()
        context_running.wire(built)
    return built, demo


@pytest.fixture(scope="module")
def tab(wired) -> context_tab.ContextTab:
    return wired[0]


def _data(tab: context_tab.ContextTab, knobs: dict[tuple[str, str], Any] | None = None,
          **changes: Any) -> dict[Any, Any]:
    values = {"model": "smollm2-135m", "backends": ["torch"], "caches": ["sliding"],
              "text_source": context_tab.HAMLET, "pasted": "", "uploaded": None, "measures": ["speed", "quality"],
              "lengths": "512", "tokens": 512, "buckets": 4, **changes}
    data = {getattr(tab, name): value for name, value in values.items()}
    for key, widget in tab.knobs.items():
        data[widget] = (knobs or {}).get(key, registry.knob(key[1]).default)
    return data


@pytest.mark.parametrize("name", list(CONTEXT_PRESETS))
def test_every_preset_puts_a_runnable_plan_on_the_tab(tab, name):
    preset = CONTEXT_PRESETS[name]
    updates = context_tab.apply_preset(tab, name)
    data = {c: (u.get("value") if isinstance(u, dict) else u) for c, u in updates.items() if c in tab.inputs()}
    plan = tab.plan(data)
    assert [(s.backend, s.cache) for s in plan.specs] == [(b, c) for b in preset.backends for c in preset.caches]
    for spec in plan.specs:  # each cache with the preset's knobs, the others at their defaults
        assert all(getattr(spec, knob) == value for knob, value in preset.caches[spec.cache].items())
    assert plan.request.lengths == tuple(int(v) for v in preset.lengths.split(","))
    assert plan.source == "hamlet.txt" and len(plan.text) > 100_000
    # only the chosen caches' knobs show
    assert {name for name, group in tab.groups.items() if updates[group]["visible"]} == set(preset.caches) & set(
        tab.groups)
    assert preset.note in updates[tab.preset_note]


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"caches": []}, "caches: none chosen"),
    ({"backends": []}, "backends: none chosen"),
    ({"measures": []}, "--measure '': give speed and/or quality"),
    ({"lengths": "512,x"}, "give context lengths in tokens"),
    ({"lengths": "8150"}, "--lengths 8150: a length and the 64 tokens decoded after it must fit smollm2-135m's "
                          "context of 8192 tokens"),
    ({"tokens": 1.5}, "quality tokens: 1.5 is not a whole number"),
    ({"text_source": context_tab.PASTED, "pasted": "  \n "}, "the pasted text is empty"),
    ({"text_source": context_tab.UPLOADED}, "the uploaded file: none yet"),
    ({"caches": ["sink"], "lengths": "128", "tokens": 200}, "window=256 is not smaller than the 200 tokens of text "
                                                             "measured"),
])
def test_bad_input_is_refused_in_one_line_before_anything_runs(tab, changes, fragment, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_TOKENS", "8192")
    with pytest.raises(PlaygroundError, match=fragment.replace("(", r"\(")):
        tab.plan(_data(tab, **changes))


def test_a_request_past_the_prompt_limit_names_the_setting(tab, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_TOKENS", "1000")
    with pytest.raises(PlaygroundError, match=r"reads 1024 tokens of text; the limit is 1000 tokens "
                                              r"\(PLAYGROUND_MAX_PROMPT_TOKENS"):
        tab.plan(_data(tab, lengths="1024"))


def test_a_binary_upload_is_refused(tab, tmp_path):
    upload = tmp_path / "data.txt"
    upload.write_bytes(b"\x00\x01\x02binary")
    with pytest.raises(PlaygroundError, match="the uploaded file '.*data.txt' holds NUL bytes"):
        tab.plan(_data(tab, text_source=context_tab.UPLOADED, uploaded=str(upload)))


def test_a_refusal_changes_only_the_status_line(tab):
    """Bad input loses nothing: the plots, tables and runs already shown stay as they are."""
    updates = list(context_running.run_context_tab(tab, _data(tab, caches=[]), _Request(), lambda *a, **k: None))
    assert updates == [{tab.status: "⚠ caches: none chosen; tick one or more caches to measure"}]


class _Request:
    session_hash = "context-tab-test"


@pytest.fixture
def model(monkeypatch, tmp_path):
    monkeypatch.setattr(context_speed, "sample_bandwidth", lambda: [10.0])  # no 1 GiB probe in the fast lane
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        yield path


def _tiny(tab, model: str, **changes: Any) -> dict[Any, Any]:
    """Two caches on PyTorch over the first 96 bytes of a pasted text: a 32-token window evicts after the first
    bucket of positions (1-32)."""
    values = {"model": model, "caches": ["static", "sliding"], "text_source": context_tab.PASTED,
              "pasted": "To be, or not to be, that is the question. " * 6, "lengths": "32,64", "tokens": 96,
              "buckets": 3, **changes}
    return _data(tab, knobs={("sliding", "window"): 32}, **values)


def test_the_tab_measures_each_cache_draws_it_as_it_finishes_and_keeps_to_its_outputs(wired, model):
    tab, demo = wired
    updates = list(context_running.run_context_tab(tab, _tiny(tab, model), _Request(), lambda *a, **k: None))
    # Gradio refuses an update to a component the event does not list as an output (the whole run fails)
    outputs = next(f.outputs for f in demo.fns.values() if f.name == "run_context_on_page")
    assert {c for u in updates for c in u} <= set(outputs)
    start, final = updates[0], updates[-1]
    assert start[tab.results]["visible"] is False and start[tab.run]["interactive"] is False
    series = ["static · torch", "sliding · torch"]
    assert start[tab.speed_plot]["x_lim"] == [32, 64] and start[tab.kl_plot]["x_lim"] == [1, 96]  # not from 0
    # Gradio's line plot lists legend entries only when given them: without colors_in_legend the legend was empty
    with_rooflines = [series[0], f"{series[0]} {ROOFLINE}", series[1], f"{series[1]} {ROOFLINE}"]
    assert list(start[tab.speed_plot]["color_map"]) == with_rooflines
    assert set(start[tab.speed_plot]["value"]["series"]) == set(with_rooflines)  # the colour domain
    for plot in (tab.memory_plot, tab.kl_plot, tab.top1_plot):
        assert list(start[plot]["color_map"]) == series and set(start[plot]["value"]["series"]) == set(series)
    # the plots list no legend (Vega's one row cut a fourth run on a phone): the tab's own names the finished runs
    assert all(start[plot]["colors_in_legend"] == [] for plot in tab.plots()) and start[tab.legend] == ""
    progress = [u[tab.status] for u in updates if tab.status in u and u[tab.status].startswith("◔ run")]
    assert any("run 2 of 2, **sliding (window 32) · torch**: speed: 64 tokens of context" in p for p in progress)
    drawn = [u for u in updates if tab.state in u and u[tab.state]]
    assert [len(u[tab.state]) for u in drawn] == [1, 2]  # drawn as each run finishes
    assert drawn[0][tab.results]["visible"] is True
    assert "✓ done: 2 runs in" in final[tab.status] and final[tab.run]["interactive"] is True
    last = drawn[-1]
    kl = last[tab.kl_plot]["value"].dropna()
    static, sliding = (kl[kl["series"] == name][KL].tolist() for name in series)
    assert max(static) <= 1e-4  # the static cache is the full cache
    assert sliding[0] <= 1e-6 < sliding[-1]  # the window is exact until it fills, then loses something
    memory = last[tab.memory_plot]["value"].dropna()
    bytes_ = {name: memory[memory["series"] == name][MEMORY].tolist() for name in series}
    assert bytes_[series[0]][1] > bytes_[series[0]][0] and bytes_[series[1]][0] == bytes_[series[1]][1]
    assert len(last[tab.speed_table]) == 4 and len(last[tab.quality_table]) == 2 * 4
    assert last[tab.speed_part]["elem_classes"] == last[tab.quality_part]["elem_classes"] == ["context-part"]
    assert re.findall(r"</i>([^<]+)</span>", last[tab.legend]) == ["static · torch", "sliding · torch"]
    assert all("machine_load" in result for result in last[tab.state])
    assert not any(math.isnan(v) for v in last[tab.speed_plot]["value"].dropna()[SPEED])


def test_the_tab_waits_for_the_generation_slot_and_never_measures_beside_a_run(tab, model):
    """A page run holds the one generation slot: the tab's measurement waits until it is free."""
    runs = context_running.run_context_tab(tab, _tiny(tab, model, caches=["static"], measures=["quality"]),
                                           _Request(), lambda *a, **k: None)
    runner.GENERATION_LOCK.__enter__()
    try:
        for update in runs:
            assert not update.get(tab.state), "measured while another run held the slot"
            if "waiting for a run" in str(update.get(tab.status, "")):
                break
        else:
            pytest.fail("the tab never said what it was waiting for")
    finally:
        runner.GENERATION_LOCK.__exit__(None, None, None)
    rest = list(runs)
    assert "✓ done: 1 runs" in rest[-1][tab.status] and any(u.get(tab.state) for u in rest)


def test_stop_keeps_the_runs_that_finished(tab, model, monkeypatch):
    measure = context_running.measure_text

    def second_waits_for_stop(spec, *args, **kwargs):
        """The second run starts only once Stop is pressed, so the stop lands inside it."""
        should_stop = args[4]  # measure_text(spec, request, text, source, progress, should_stop, where)
        if spec.cache == "sliding":
            assert wait_until(should_stop)
        return measure(spec, *args, **kwargs)

    monkeypatch.setattr(context_running, "measure_text", second_waits_for_stop)
    runs = context_running.run_context_tab(tab, _tiny(tab, model, measures=["quality"]), _Request(),
                                           lambda *a, **k: None)
    last: dict[Any, Any] = {}
    updates_seen = []
    for update in runs:
        updates_seen.append(update)
        if update.get(tab.state):
            stop_flag(_Request()).set()  # once the first run is drawn
        if tab.run in update:
            last = update
    assert last[tab.status] == "■ stopped (stopped after 0 of 95 positions): kept the 1 of 2 runs that finished"
    assert last[tab.results]["visible"] is True and last[tab.run]["interactive"] is True
    drawn = [u for u in updates_seen if tab.legend in u][-1]
    # a quality-only run: no empty speed plots or table; the stopped run has no entry in the legend
    assert "context-part-empty" in drawn[tab.speed_part]["elem_classes"]
    assert "context-part-empty" not in drawn[tab.quality_part]["elem_classes"]
    assert "static · torch" in drawn[tab.legend] and "sliding" not in drawn[tab.legend]
    assert "roofline" not in drawn[tab.legend]


def wait_until(condition, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_stop_mid_measurement_ends_it_between_chunks(model):
    """Stop reaches inside a measurement: quality checks it between chunks, speed between tokens."""
    from playground.context.quality import measure_quality
    from playground.context.request import MeasureStopped
    from playground.models.loaded import LOADED
    from playground.spec import RunSpec

    loaded, _ = LOADED.get(model, "fp32")
    asked = threading.Event()
    with pytest.raises(MeasureStopped, match="stopped after 8 of 95 positions"):
        measure_quality(loaded, RunSpec(model=model, cache="static"), list(range(1, 97)), lambda m: asked.set(),
                        chunk=8, should_stop=asked.is_set)
    with pytest.raises(MeasureStopped, match="stopped at 32 tokens of context"):
        context_speed.measure_speed(loaded, RunSpec(model=model), list(range(1, 97)), [32], lambda m: None,
                                    should_stop=lambda: True)


def test_the_page_guide_lists_every_context_preset():
    text = Path(__file__).parents[2].joinpath("docs", "page.md").read_text(encoding="utf-8")
    section = text.split("## Long context tab", 1)[1].split("\n## ", 1)[0]
    assert all(f'"{name}"' in section for name in CONTEXT_PRESETS)
    # and every element id it promises exists on the tab
    with gr.Blocks():
        built = context_tab.build_context_tab()
    ids = {getattr(c, "elem_id", None) for c in vars(built).values() if hasattr(c, "elem_id")}
    ids |= {w.elem_id for w in built.knobs.values()} | {g.elem_id for g in built.groups.values()}
    ids |= {b.elem_id for b in built.presets.values()}
    listed = set(re.findall(r"`(context-[a-z0-9_-]+)`", section)) - {"context-tab", "context-<cache>-knobs",
                                                                         "context-<cache>-<knob>"}
    assert listed <= ids, listed - ids


def test_a_step_past_the_time_limit_stops_with_the_setting_named(tab, model, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_REQUEST_SECONDS", "0.001")
    updates = list(context_running.run_context_tab(tab, _tiny(tab, model, caches=["static"]), _Request(),
                                                   lambda *a, **k: None))
    assert updates[-1][tab.status].startswith("■ a step of the measurement ran past the time limit of 0 s "
                                              "(PLAYGROUND_MAX_REQUEST_SECONDS) and stopped: kept the 0 of 1")
    assert updates[-1][tab.results]["visible"] is False

"""Presets: each sets a runnable comparison sized so its point shows, and none can change a run in progress."""

from __future__ import annotations

from typing import Any

import pytest

from playground.events import DoneEvent, TextEvent
from playground.spec import RunSpec
from playground.ui.columns import MAX_COLUMNS, problem
from playground.ui.export import page_settings, parse_settings
from playground.ui.presets import PRESETS, SHOOT_OUT_WINDOW
from tests.unit.page_fakes import fake_result, page_data


def test_every_preset_is_a_valid_page_of_runnable_columns_with_its_own_prompt():
    for name, preset in PRESETS.items():
        assert 2 <= len(preset.columns) <= MAX_COLUMNS and preset.note and preset.prompt.strip(), name
        parse_settings(page_settings(preset.prompt, 0, preset.mode, list(preset.columns)))
        for column in preset.columns:
            assert problem(column) == "", (name, column)


def test_the_cache_shoot_out_runs_long_enough_to_evict_and_to_pack_quantized_tokens():
    specs = [RunSpec.from_dict(c) for c in PRESETS["Cache shoot-out"].columns]
    assert [s.cache for s in specs][0] == "dynamic" and len({s.cache for s in specs}) == len(specs)
    assert {s.strategy for s in specs} == {"greedy"}  # only the cache differs
    windowed = [s for s in specs if s.cache in ("sliding", "sink")]
    words = len(PRESETS["Cache shoot-out"].prompt.split())  # fewer than its tokens, under any template
    assert windowed and all(s.window == SHOOT_OUT_WINDOW < words + s.max_new_tokens for s in windowed)
    quantized = next(s for s in specs if s.cache == "quantized")
    assert quantized.max_new_tokens >= 3 * quantized.residual_length  # several packs: a sawtooth, not one step


def test_the_sampling_and_assisted_presets_carry_what_makes_them_differ():
    sampled = [RunSpec.from_dict(c) for c in PRESETS["Greedy vs sampling vs beam"].columns]
    temperatures = sorted(s.temperature for s in sampled if s.strategy == "sampling")
    assert len(temperatures) == 2 and 0.5 <= temperatures[0] < temperatures[1] <= 1.0  # varied, still sane
    assisted = PRESETS["Assisted vs plain"]
    drafts = [c for c in assisted.columns if c["strategy"] == "assisted"]
    assert drafts and all(c.get("prompt_lookup") for c in drafts)  # drafts from the passage itself
    assert any(c["strategy"] == "greedy" for c in assisted.columns)  # against the same model alone
    passage = assisted.prompt.split("\n\n", 1)[1]
    assert len(passage.split()) >= 30  # enough text in the prompt for the output to copy from
    backends = {RunSpec.from_dict(c).backend for c in PRESETS["PyTorch vs JAX"].columns}
    assert backends == {"torch", "jax"}


def test_three_compilers_runs_the_same_greedy_request_on_each_engine():
    preset = PRESETS["Three compilers"]
    specs = [RunSpec.from_dict(c) for c in preset.columns]
    assert [(s.backend, s.cache, s.torch_compile) for s in specs] == [("torch", "dynamic", "off"), (
        "torch", "static", "off"), ("torch", "static", "default"), ("jax", "static", "off")]
    same = {(s.strategy, s.model, s.weights, s.max_new_tokens) for s in specs}
    assert same == {("greedy", "smollm2-135m", "fp32", 64)}
    assert "compile" in preset.note and "JAX" in preset.note


@pytest.fixture(scope="module")
def ui():
    from playground.ui.wiring import build_ui

    return build_ui()  # (the Blocks, its Page)


@pytest.fixture(scope="module")
def page(ui):
    return ui[1]


def _put_on_page(data: dict[Any, Any], updates: dict[Any, Any]) -> None:
    """What the browser would send after the updates landed: each updated value replaces the old one."""
    for component, update in updates.items():
        value = update.get("value", data.get(component)) if isinstance(update, dict) else update
        if component in data:
            data[component] = value


def test_a_preset_applied_during_a_run_does_not_change_the_running_columns(page, monkeypatch):
    from playground import runner
    from playground.ui import run as ui_run
    from playground.ui.wiring import apply_preset

    assert all(button in page.lockable() for button in page.presets.values())  # locked while columns run
    ran: list[tuple[str, RunSpec]] = []
    data = page_data(page, {page.columns[1].knobs["strategy"]: "sampling"})

    def fake_run(prompt, spec, should_stop=None, history=None, **_):
        ran.append((prompt, spec))
        if len(ran) == 1:  # the preset lands while column 1 generates
            updates = apply_preset(page, "Cache shoot-out", data)
            assert page.columns[2].knobs["cache"] in updates  # it really rewrote the page...
            _put_on_page(data, updates)
            assert data[page.visible] == [True] * MAX_COLUMNS and data[page.prompt] != "Hello"
        yield TextEvent("t1", "t1", 1)
        yield DoneEvent(fake_result([1, 2], strategy=spec.strategy))

    monkeypatch.setattr(runner, "run", fake_run)
    request = type("Request", (), {"session_hash": "preset-during-run"})()
    updates = list(ui_run.run_all(page, data, request, lambda *a, **k: None))
    # ...but the run finished the two columns it started with, on its own prompt and settings
    assert [(prompt, spec.strategy, spec.cache) for prompt, spec in ran] == [
        ("Hello", "greedy", "dynamic"), ("Hello", "sampling", "dynamic")]
    assert updates[-1][page.status].startswith("✓ 2 columns ran")


def test_applying_a_preset_puts_its_prompt_and_columns_on_the_page_and_keeps_the_seed(page):
    from playground.ui.wiring import apply_preset

    data = page_data(page, {page.seed: 11})
    updates = apply_preset(page, "Assisted vs plain", data)
    _put_on_page(data, updates)
    preset = PRESETS["Assisted vs plain"]
    assert data[page.prompt] == preset.prompt and data[page.seed] == 11
    assert data[page.visible] == [i < len(preset.columns) for i in range(MAX_COLUMNS)]
    assert data[page.columns[0].knobs["max_new_tokens"]] == preset.columns[0]["max_new_tokens"]
    assert data[page.columns[1].knobs["draft_source"]] == "prompt lookup"
    assert preset.note in updates[page.status]
    assert preset.note in updates[page.preset_note]  # beside the results, where Run's status line cannot replace it
    from playground.ui.run import run_outputs
    assert page.preset_note not in run_outputs(page)
    assert updates[page.run]["value"] == f"▶ Run all {len(preset.columns)} columns"  # the button counts them


def test_the_three_compilers_preset_sets_the_torch_compile_control_of_its_third_column(page):
    from playground.ui.wiring import apply_preset

    data = page_data(page, {})
    _put_on_page(data, apply_preset(page, "Three compilers", data))
    assert [data[page.columns[i].knobs["torch_compile"]] for i in range(MAX_COLUMNS)] == [
        "off", "off", "default", "off"]
    assert [data[page.columns[i].knobs["backend"]] for i in range(MAX_COLUMNS)] == ["torch", "torch", "torch", "jax"]


def test_the_guide_methods_diverse_beam_column_returns_each_text_from_its_own_group():
    """Diverse beam search pools every group's hypotheses and returns the best: with one beam per group each
    group holds one hypothesis, so the two returned texts come from two groups (two beams of one group would
    differ only in their last words)."""
    diverse = next(RunSpec.from_dict(c) for c in PRESETS["The guide's methods"].columns
                   if c["strategy"] == "diverse_beam")
    assert diverse.num_beams == diverse.num_beam_groups and 2 <= diverse.num_return_sequences <= diverse.num_beam_groups


def test_the_dry_sweep_preset_runs_on_prompts_that_already_repeat_a_sentence():
    from playground.sweep.presets import SWEEP_PRESETS

    sweep = SWEEP_PRESETS["DRY against repetition"].sweep()
    assert sweep.values[0] == 0 and list(sweep.values) == sorted(sweep.values)  # from off, growing
    for prompt in sweep.prompts:  # the middle sentence is said twice: there is a loop for DRY to break
        first, second = prompt.lower().split(". ")[:2]
        assert second.split(" ", 3)[3] in first, prompt  # "the next night <the first sentence's clause>"

"""The Sweep tab's events: presets and choices outside the queue, the run in it, Stop, and row picks."""

from __future__ import annotations

from functools import partial
from typing import Any

import gradio as gr

from playground.ui.events import Handler, Updates, on_private, writes
from playground.ui.sweep_running import run_sweep_tab
from playground.ui.sweep_tab import (
    SweepTab,
    apply_preset,
    choose_prompts,
    choose_row,
    click_point,
    compile_note_for,
)
from playground.ui.tab_parts import wire_run_and_stop


def wire(tab: SweepTab) -> None:
    """The tab's events: presets, the prompt and knob choices (outside the queue), the run (queued, like a page
    run: the runner's generation lock keeps one generation at a time), Stop, and row picks. The handlers are named
    for the tab: Gradio names endpoints after functions, private ones too, and a plain `run` would push the
    public `/run` to `/run_1`."""
    preset_outputs = (tab.knob, tab.values, tab.seeds, tab.prompt_set, tab.prompt_count, tab.own_prompts, tab.model,
                      tab.backend, tab.strategy, tab.cache, tab.max_new_tokens, tab.other, tab.compile_note,
                      tab.preset_note)
    for name, button in tab.presets.items():
        on_private(button.click, Handler(partial(apply_preset, tab, name), preset_outputs))
    on_private(tab.prompt_set.input, Handler(partial(choose_prompts, tab), (tab.prompt_count, tab.own_prompts)),
               tab.prompt_set)

    @writes(tab.compile_note)
    def sweep_compile_note(knob: str, backend: str) -> Updates:
        return {tab.compile_note: compile_note_for(knob, backend)}

    on_private(partial(gr.on, [tab.knob.input, tab.backend.input]), sweep_compile_note, [tab.knob, tab.backend])
    outputs = (tab.run, tab.stop, tab.status, tab.row_choice, tab.tokens, tab.state, tab.download_json,
               tab.download_csv, tab.compile_note, tab.empty_note, tab.results, tab.table, *tab.plots)

    wire_run_and_stop("sweep", tab.run, tab.stop, tab.status, tab.inputs(), outputs, partial(run_sweep_tab, tab),
                      "■ Stopping after the current token; the finished rows stay…")

    @writes(tab.row_choice, tab.tokens)
    def pick_sweep_row(kept: dict[str, Any] | None, label: str | None) -> Updates:
        return choose_row(tab, kept, label)

    on_private(tab.row_choice.input, pick_sweep_row, [tab.state, tab.row_choice])

    @writes(tab.row_choice, tab.tokens)
    def click_sweep_point(kept: dict[str, Any] | None, evt: gr.EventData) -> Updates:
        return click_point(tab, kept, evt)

    on_private(tab.tokens.click, click_sweep_point, tab.state)

"""The page's Context tab: what each cache costs and loses as the context grows, as `python -m playground context`
measures it, for several caches and both backends at once.

Each chosen cache shows its own knobs (read from the registry, so a knob registered for a cache shows up here
without code), and each cache runs on each chosen backend. The text is the shipped Hamlet, pasted text or an
uploaded file. Everything that can be refused without loading a model is refused when Run is pressed, in one
line, before any measurement starts (context_running.py runs them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from playground import limits, registry
from playground.context.measure import check_before_loading
from playground.context.request import (
    MEASURES,
    ContextRequest,
    parse_request,
)
from playground.data.text_files import DEFAULT_TEXT, checked_text, read_text_file
from playground.errors import PlaygroundError
from playground.models.catalog import model_choices
from playground.spec import RunSpec
from playground.ui.events import Inputs, Updates
from playground.ui.knob_widgets import knob_widget
from playground.ui.presets import CONTEXT_PRESETS, ContextPreset
from playground.ui.tab_parts import preset_buttons

HAMLET, PASTED, UPLOADED = "the shipped Hamlet (public domain)", "pasted text", "an uploaded file"
FIRST_PRESET = next(iter(CONTEXT_PRESETS.values()))
EMPTY_NOTE = ("Choose caches and backends and press **Run** (or a preset) to see decode speed and KV memory against "
              "the context length, and what each cache loses against the full cache position by position.")


def knobbed_caches() -> list[registry.CacheType]:
    """The registered caches that read knobs of their own: each gets a group of widgets on the tab."""
    return [cache for cache in registry.caches() if cache.knobs]


@dataclass(frozen=True)
class ContextPlan:
    """What Run measures: one spec per backend and cache (backend first, so one backend's programs and weights
    serve its caches in turn), the request, and the text with the names it goes by."""

    specs: tuple[RunSpec, ...]
    request: ContextRequest
    text: str
    source: str  # what the result's JSON says the text was
    where: str  # how a refusal names it


@dataclass
class ContextTab:
    """The tab's components; `inputs()` is what Run reads."""

    presets: dict[str, gr.Button]
    preset_note: gr.Markdown
    model: gr.Dropdown
    backends: gr.CheckboxGroup
    caches: gr.CheckboxGroup
    groups: dict[str, gr.Group]  # a cache's knobs, shown while it is chosen
    knobs: dict[tuple[str, str], Any]  # (cache, knob) -> its widget
    text_source: gr.Radio
    pasted: gr.Textbox
    uploaded: gr.File
    measures: gr.CheckboxGroup
    lengths: gr.Textbox
    tokens: gr.Number
    buckets: gr.Number
    run: gr.Button
    stop: gr.Button
    status: gr.Markdown
    empty_note: gr.Markdown  # a sentence where the plots will be, until a measurement finishes
    results: gr.Column
    legend: gr.HTML  # the runs drawn, with their colours (the plots' own legends are hidden: ui/style.py)
    load: gr.Markdown  # the busy-machine line for the runs whose speed was measured under load
    speed_part: gr.Column  # the speed and memory plots and the speed table
    quality_part: gr.Column  # the KL and top-1 plots and the quality table
    speed_plot: gr.LinePlot
    memory_plot: gr.LinePlot
    kl_plot: gr.LinePlot
    top1_plot: gr.LinePlot
    speed_table: gr.Dataframe
    quality_table: gr.Dataframe
    state: gr.State  # the finished measurements' JSON objects

    def inputs(self) -> list[Any]:
        return [self.model, self.backends, self.caches, *self.knobs.values(), self.text_source, self.pasted,
                self.uploaded, self.measures, self.lengths, self.tokens, self.buckets]

    def plots(self) -> list[gr.LinePlot]:
        return [self.speed_plot, self.memory_plot, self.kl_plot, self.top1_plot]

    def plan(self, data: Inputs) -> ContextPlan:
        """The measurements the controls describe, each checked as the command checks it before anything loads;
        a PlaygroundError names what is wrong."""
        backends, caches = list(data[self.backends] or []), list(data[self.caches] or [])
        if not caches:
            raise PlaygroundError("caches: none chosen; tick one or more caches to measure")
        if not backends:
            raise PlaygroundError("backends: none chosen; tick torch, jax or both")
        request = parse_request(",".join(data[self.measures] or []), str(data[self.lengths] or ""),
                                _whole(data[self.tokens], "quality tokens"), _whole(data[self.buckets], "buckets"))
        _check_prompt_limit(request)
        specs = tuple(self._spec(data, backend, cache) for backend in backends for cache in caches)
        for spec in specs:
            check_before_loading(spec, request)
        text, source, where = self._text(data)
        return ContextPlan(specs, request, text, source, where)

    def _spec(self, data: Inputs, backend: str, cache: str) -> RunSpec:
        knobs = {name: data[widget] for (owner, name), widget in self.knobs.items() if owner == cache}
        return RunSpec.from_dict({"model": data[self.model], "backend": backend, "cache": cache, **knobs})

    def _text(self, data: Inputs) -> tuple[str, str, str]:
        """The text, what the JSON calls it, and how a refusal names it."""
        source = data[self.text_source]
        if source == PASTED:
            where = "the pasted text"
            return checked_text(str(data[self.pasted] or ""), where), "pasted text", where
        if source == UPLOADED:
            path = data[self.uploaded]
            if not path:
                raise PlaygroundError("the uploaded file: none yet; upload a UTF-8 text file or pick another text")
            where = f"the uploaded file {Path(str(path)).name!r}"
            return read_text_file(path, "the uploaded file"), Path(str(path)).name, where
        return read_text_file(DEFAULT_TEXT, "the shipped text"), str(DEFAULT_TEXT.name), "the shipped Hamlet"


def _whole(value: Any, field: str) -> int:
    """A number box's value as a whole number (Gradio hands floats, or None for an empty box)."""
    if value is None or float(value) != int(float(value)):
        raise PlaygroundError(f"{field}: {value!r} is not a whole number")
    return int(float(value))


def _check_prompt_limit(request: ContextRequest) -> None:
    """The page's prompt limit holds here too: a length is a prompt, and so are the quality tokens."""
    longest = request.longest()
    if longest > limits.max_prompt_tokens():
        raise PlaygroundError(f"the request reads {longest} tokens of text; the limit is {limits.max_prompt_tokens()} "
                              "tokens (PLAYGROUND_MAX_PROMPT_TOKENS: ask for fewer, or raise the setting up to the "
                              "model's context)")


def build_context_tab() -> ContextTab:
    """The tab's components (call inside a gr.Tab)."""
    preset = FIRST_PRESET
    gr.Markdown("How each **KV cache** costs and loses as the **context grows**, on a long real text: decode speed "
                "and KV memory at each context length (each run's roofline beside its speed), and, teacher-forced "
                "through the cache, how far its next-token distribution strays from the full cache's along the text "
                "(`python -m playground context` measures the same).")
    presets, preset_note = preset_buttons("context", CONTEXT_PRESETS)
    with gr.Row(equal_height=False):
        with gr.Column(min_width=280):
            model = gr.Dropdown(model_choices(), value=preset.model, label="model", allow_custom_value=True,
                                elem_id="context-model")
            backends = gr.CheckboxGroup(list(registry.backend_names()), value=list(preset.backends), label="backends",
                                        elem_id="context-backends")
            caches = gr.CheckboxGroup(list(registry.cache_names()), value=list(preset.caches), label="caches",
                                      info="each runs on each backend, against the full (dynamic) cache there",
                                      elem_id="context-caches")
            groups, knobs = _cache_knobs(preset)
        with gr.Column(min_width=280):
            text_source = gr.Radio([HAMLET, PASTED, UPLOADED], value=HAMLET, label="text",
                                   elem_id="context-text-source")
            pasted = gr.Textbox("", lines=4, max_lines=8, label="your text", visible=False,
                                elem_id="context-text")
            uploaded = gr.File(None, file_types=[".txt", ".md"], type="filepath", label="a UTF-8 text file",
                               visible=False, elem_id="context-file")
            measures = gr.CheckboxGroup(list(MEASURES), value=list(preset.measures), label="measure",
                                        elem_id="context-measures")
            lengths = gr.Textbox(preset.lengths, max_lines=1, label="lengths (speed: tokens of context)",
                                 info="comma-separated; each decodes 64 tokens after it", elem_id="context-lengths")
            with gr.Row():
                tokens = gr.Number(preset.tokens, precision=0, minimum=2, label="quality tokens",
                                   info="teacher-forced from the text's start", elem_id="context-tokens")
                buckets = gr.Number(preset.buckets, precision=0, minimum=1, label="buckets of positions",
                                    elem_id="context-buckets")
    with gr.Row():
        run = gr.Button("▶ Run", variant="primary", elem_id="context-run")
        stop = gr.Button("■ Stop (keeps finished runs)", interactive=False, elem_id="context-stop")
    status = gr.Markdown("", elem_id="context-status")
    empty_note = gr.Markdown(EMPTY_NOTE, elem_id="context-empty")
    with gr.Column(visible=False, elem_id="context-results") as results:
        legend = gr.HTML("", elem_id="context-legend")
        load = gr.Markdown("", elem_id="context-load", elem_classes=["context-load"])
        # speed and quality each in a column of its own, hidden while it has nothing to draw (a quality-only run)
        with gr.Column(elem_id="context-speed-part", elem_classes=["context-part"]) as speed_part:
            speed, memory = _plot_row("speed")
            speed_table = gr.Dataframe(None, label="speed per context length", interactive=False, wrap=False,
                                       elem_id="context-speed-table")
        with gr.Column(elem_id="context-quality-part", elem_classes=["context-part"]) as quality_part:
            kl, top1 = _plot_row("quality")
            quality_table = gr.Dataframe(None, label="quality per bucket of positions, against the full cache",
                                         interactive=False, wrap=False, elem_id="context-quality-table")
    return ContextTab(presets, preset_note, model, backends, caches, groups, knobs, text_source, pasted, uploaded,
                      measures, lengths, tokens, buckets, run, stop, status, empty_note, results, legend, load,
                      speed_part, quality_part, speed, memory, kl, top1, speed_table, quality_table, gr.State([]))


def _cache_knobs(preset: ContextPreset) -> tuple[dict[str, gr.Group], dict[tuple[str, str], Any]]:
    """A group per cache with knobs, its widgets drawn from the registry (ids context-<cache>-<knob>)."""
    groups: dict[str, gr.Group] = {}
    knobs: dict[tuple[str, str], Any] = {}
    for cache in knobbed_caches():
        chosen = preset.caches.get(cache.name)
        with gr.Group(visible=chosen is not None, elem_id=f"context-{cache.name}-knobs") as group:
            gr.Markdown(f"**{cache.label}**", elem_classes=["context-cache-title"])
            for name in cache.knobs:
                value = (chosen or {}).get(name, registry.knob(name).default)
                knobs[(cache.name, name)] = knob_widget(registry.knob(name), 0, value,
                                                        elem_id=f"context-{cache.name}-{name}")
        groups[cache.name] = group
    return groups, knobs


def _plot_row(measure: str) -> tuple[gr.LinePlot, gr.LinePlot]:
    """Speed and memory against the context length ("speed"), or KL and top-1 agreement against the position."""
    from playground.ui.context_frames import KL, MEMORY, POSITION, SPEED, TOP1, empty_frames

    frames = empty_frames()
    # x ticks in SI units ("1k"): at a phone's width "950" and "1,000" ran into each other
    common: dict[str, Any] = {"color": "series", "height": 280, "min_width": 300, "tooltip": "all",
                              "x_axis_format": "~s"}
    with gr.Row(equal_height=True, elem_classes=["context-plots"]):  # ui.style: legends drawn whole
        if measure == "speed":
            return (gr.LinePlot(frames["speed"], x="context (tokens)", y=SPEED, label="decode speed (tokens/s) and "
                                "each run's roofline (light)", elem_id="context-speed-plot", **common),
                    gr.LinePlot(frames["memory"], x="context (tokens)", y=MEMORY, label="KV cache at the end of "
                                "the run (MiB)", elem_id="context-memory-plot", **common))
        return (gr.LinePlot(frames["kl"], x=POSITION, y=KL, label="KL(full ‖ cache) per bucket of positions (nats)",
                            elem_id="context-kl-plot", **common),
                gr.LinePlot(frames["top1"], x=POSITION, y=TOP1, label="top-1 agreement with the full cache per "
                            "bucket of positions", elem_id="context-top1-plot", **common))


def apply_preset(tab: ContextTab, name: str) -> Updates:
    """Put a preset's model, backends, caches (with their knobs), text, measures and lengths on the tab."""
    preset = CONTEXT_PRESETS[name]
    updates: Updates = {tab.model: preset.model, tab.backends: list(preset.backends),
                        tab.caches: list(preset.caches), tab.measures: list(preset.measures),
                        tab.lengths: preset.lengths, tab.tokens: preset.tokens, tab.buckets: preset.buckets,
                        tab.preset_note: f"**What to look for** ({name}): {preset.note}",
                        **show_text_source(tab, HAMLET), tab.text_source: HAMLET}
    for (cache, knob), widget in tab.knobs.items():
        updates[widget] = preset.caches.get(cache, {}).get(knob, registry.knob(knob).default)
    return updates | show_cache_knobs(tab, list(preset.caches))


def show_cache_knobs(tab: ContextTab, caches: list[str]) -> Updates:
    """A cache's knobs show while it is chosen."""
    return {group: gr.update(visible=name in caches) for name, group in tab.groups.items()}


def show_text_source(tab: ContextTab, source: str) -> Updates:
    """The box for pasted text, or the upload, as the text source asks."""
    return {tab.pasted: gr.update(visible=source == PASTED), tab.uploaded: gr.update(visible=source == UPLOADED)}


def preset_outputs(tab: ContextTab) -> list[Any]:
    """What apply_preset sets."""
    return [tab.model, tab.backends, tab.caches, tab.measures, tab.lengths, tab.tokens, tab.buckets,
            tab.preset_note, tab.text_source, tab.pasted, tab.uploaded, *tab.knobs.values(), *tab.groups.values()]

"""One run column: its controls, which knobs apply to the current choice, and column settings <-> RunSpec dicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import gradio as gr

from playground import registry, runner
from playground.decode_costs import draft_note
from playground.errors import PlaygroundError
from playground.models.catalog import model_choices
from playground.registry.builtin_knobs import MORE_SAMPLING, PENALTIES, SAMPLING
from playground.spec import RunSpec, max_new_tokens_cap
from playground.ui.card_groups import (
    cache_knobs,
    constraint_knobs,
    slider,
    store_knob_states,
    strategy_knobs,
)
from playground.ui.choices import cache_choices, offered, strategy_choices, weights_choices
from playground.ui.cold_ttft import ColdTtft, cold_ttft_controls
from playground.ui.cut import PICK_TOKEN_JS
from playground.ui.events import Inputs, Updates, on_private, writes
from playground.ui.knob_widgets import chain_knobs, chain_widgets, strategy_groups
from playground.ui.settings import ColumnSettings, ColumnValues
from playground.ui.step_view import step_views
from playground.ui.strategy_view import VIEW_BOX_ID, card_parts

MAX_COLUMNS = 4
# The page opens on a comparison that shows a difference: the most likely continuation against a sample of it.
START_SETTINGS: tuple[ColumnSettings, ...] = (
    {"strategy": "greedy", "cache": "dynamic", "max_new_tokens": 48},
    {"strategy": "sampling", "cache": "dynamic", "max_new_tokens": 48, "temperature": 0.9, "top_k": 50, "top_p": 0.95},
)
START_COLUMNS = len(START_SETTINGS)

# The RunSpec keys every column shows, whatever its choice
COMMON_KEYS = ("model", "weights", "backend", "strategy", "cache", "max_new_tokens", "min_new_tokens")
# the logits chain's first stage, on every strategy: the page shows it on every column (RunSpec says where it
# cannot run, as for any knob)
CONSTRAINT_KEYS = ("constraint", "constraint_text")
# Knob groups of the settings card drawn by their own code: a group is shown when the choice reads any of its knobs
OWN_GROUPS = {
    "bits_knobs": ("cache_bits", "residual_length", "cache_key_bits", "cache_value_bits"),
    "dtype_knobs": ("cache_dtype",),
    "window_box": ("window", "sink_tokens"),
    "sink_tokens": ("sink_tokens",),
    "devices": ("devices",),
    "torch_compile": ("torch_compile",),  # PyTorch only
    "reuse": ("reuse",),  # the prefix store: both backends (disabled with the reason where a column runs cold)
    "constraint_box": CONSTRAINT_KEYS,
}
def groups() -> dict[str, tuple[str, ...]]:
    """Every knob group of the settings card: the chain's and the strategies' (drawn from the knobs' records), the
    strategies' card parts' own blocks, then the others."""
    own = {name: keys for part in card_parts() for name, keys in part.own_groups.items()}
    return {"sampling_knobs": chain_knobs(SAMPLING) + chain_knobs(MORE_SAMPLING),
            "penalty_knobs": chain_knobs(PENALTIES), **strategy_groups(), **own, **OWN_GROUPS}


def column_keys() -> tuple[str, ...]:
    """RunSpec keys a column owns; seed and chat are page-wide so that every column answers the same request."""
    return tuple(dict.fromkeys((*COMMON_KEYS, *(k for knobs in groups().values() for k in knobs))))


def spec_defaults() -> dict[str, Any]:
    return RunSpec().to_dict()


def ui_defaults() -> dict[str, Any]:
    defaults = spec_defaults()
    own = {key: value for part in card_parts() for key, value in part.defaults.items()}
    return {**{k: defaults[k] for k in column_keys()}, **own}


def int_keys() -> set[str]:
    return {knob.name for knob in registry.knobs() if knob.kind is int}


def samples(strategy: str, assisted_sampling: bool) -> bool:
    """Whether the sampling knobs apply (the strategy's entry decides)."""
    return registry.strategy(strategy).samples(assisted_sampling)


def relevant_keys(strategy: str, cache: str, backend: str, assisted_sampling: bool = False) -> list[str]:
    """The RunSpec keys that change what this column computes, in display order (assisted decoding that samples
    uses the sampling knobs too)."""
    keys = list(COMMON_KEYS)
    sampled = chain_knobs(SAMPLING) + chain_knobs(MORE_SAMPLING) if samples(strategy, assisted_sampling) else ()
    backend_knobs = registry.backend_type(backend).knobs if backend in registry.backend_names() else ()
    for extra in (registry.strategy(strategy).knobs, sampled, chain_knobs(PENALTIES), registry.cache_type(cache).knobs,
                  backend_knobs, CONSTRAINT_KEYS):
        keys += [k for k in extra if k not in keys]
    return keys


def visibility(strategy: str, cache: str, backend: str, held: Mapping[str, Any] | None = None,
               assisted_sampling: bool = False) -> dict[str, bool]:
    """Which knob groups are shown for the current choice (names of ColumnControls.groups); `held` holds the
    card parts' own controls' values (which of their blocks show)."""
    keys = set(relevant_keys(strategy, cache, backend, assisted_sampling))
    shown = {group: bool(keys & set(knobs)) for group, knobs in groups().items()}
    shown["sampling_knobs"] = samples(strategy, assisted_sampling)
    for part in card_parts():
        shown |= part.shown(held or {})
    return shown


def _clean(key: str, value: Any) -> Any:
    """Sliders and number boxes hand back floats; RunSpec wants ints where the field is an int."""
    if key in int_keys() and isinstance(value, float) and value.is_integer():
        return int(value)
    if key == "model" and isinstance(value, str):
        return value.strip()
    return value


def column_settings(values: ColumnValues) -> ColumnSettings:
    """Control values -> the RunSpec keys that apply (hidden knobs left out, so they cannot refuse a run)."""
    sampled = bool(values.get("assisted_sampling"))
    keys = relevant_keys(values["strategy"], values["cache"], values["backend"], sampled)
    held: Mapping[str, Any] = values
    parts = card_parts()
    written = {key for part in parts for key in part.writes}
    settings = cast(ColumnSettings, {k: _clean(k, held[k]) for k in keys if k not in written})
    for part in parts:  # a part's keys, where the choice reads them
        if set(part.writes) & set(keys) or not part.writes:
            part.to_settings(held, settings)
    if settings.get("constraint") == "none":  # left out when none, so a link without one stays as it was
        settings.pop("constraint")
        settings.pop("constraint_text", None)
    for key in [k for k, default in (("torch_compile", "off"), ("reuse", True)) if settings.get(k) == default]:
        del settings[key]  # left out at their defaults, so a column's settings and links stay as they were
    return settings


def control_values(settings: ColumnSettings) -> ColumnValues:
    """Column settings (as saved or shared) -> a value for every control, defaults for the rest."""
    given: Mapping[str, Any] = settings
    defaults = ui_defaults()
    values = cast(ColumnValues, {k: given.get(k, defaults[k]) for k in column_keys()})
    for part in card_parts():
        part.to_values(given, values, defaults)
    return values


def problem(settings: ColumnSettings, check_sources: bool = True) -> str:
    """Why this column cannot run as set, or '': RunSpec's own message (ranges, combinations), then what the
    runner can refuse before loading (the model and draft exist and can be had here, devices divide heads)."""
    try:
        spec = RunSpec.from_dict(settings)
        if check_sources:
            runner.preflight(spec)
    except PlaygroundError as exc:
        return str(exc)
    return ""


def stage_knob_states(strategy: str) -> dict[str, tuple[bool, str]]:
    """(interactive, info) of the knobs of the chain's stages that run with some strategies only: disabled under
    the others, their help followed by why."""
    states = {}
    for stage in registry.processors():
        if not stage.strategies:
            continue
        usable = stage.runs_with(strategy)
        why = "" if usable else \
            f" · off with {strategy}: {stage.strategies_why} ({', '.join(stage.strategies)} only)"
        for name in stage.knobs:
            states[name] = (usable, registry.knob(name).help + why)
    return states


def notice_text(settings: ColumnSettings) -> str:
    """Why the column cannot run ('⚠ ...': RunSpec's messages already say what to pick instead), else what a
    draft model has cost here ('ℹ ...'), else ''."""
    reason = problem(settings)
    if reason:
        return f"⚠ {reason}"
    return draft_note(RunSpec.from_dict(settings))


def title_classes(position: int) -> list[str]:
    """A card title's classes: its dot takes the colour of the column's position (its plot series)."""
    return ["card-title", f"tint-{position}"]


def output_classes(slot: int, position: int) -> list[str]:
    """An output card's classes: its place on a phone follows its slot, its stripe the colour of its position."""
    return ["out-card", f"card-{slot}", f"tint-{position}"]


@dataclass
class ColumnControls:
    """The components of one run column: its settings card and its output card."""

    index: int
    settings_box: gr.Column
    output_box: gr.Column
    knobs: dict[str, Any]  # COLUMN_KEYS + the card parts' own keys: Gradio input components, each with an .input event
    groups: dict[str, Any]  # keys of visibility(): blocks shown or hidden together
    title: gr.Markdown  # "Column N": N is the position among the visible columns
    remove: gr.Button
    notice: gr.Markdown
    output: gr.Textbox
    chatbot: gr.Chatbot
    tokens: gr.HTML
    view_box: gr.HTML  # the strategy view's own box (a beam column's sequences and tree); hidden when empty
    cache_step: gr.Slider  # sliding / sink / quantized columns: the step the cache strip shows
    cache_strip: gr.HTML  # which positions the cache keeps, evicts or quantizes at that step
    step_candidates: gr.HTML  # step mode: the candidates at the current position, one button each
    branches: gr.HTML  # step mode: the branch tree
    cold: ColdTtft  # chat mode: the last turn's TTFT measured cold, on demand

    def read(self, data: Inputs) -> ColumnValues:
        """The controls' values, as Gradio hands them over (keyed by component), by name."""
        return cast(ColumnValues, {name: data[knob] for name, knob in self.knobs.items()})

    def updates_for(self, settings: ColumnSettings) -> Updates:
        """Set every control from saved settings, with the matching groups, choice labels and notice."""
        values = control_values(settings)
        updates: Updates = {self.knobs[k]: gr.update(value=v) for k, v in values.items()}
        for component, update in self.structure(values).items():
            # some knobs are their own group (a card part's, sink tokens): keep their value too
            earlier = updates.get(component)
            updates[component] = {**earlier, **update} if isinstance(earlier, dict) else update
        # a shared or loaded constraint opens its fold, so that what shapes the output is in sight
        box = self.groups["constraint_box"]
        updates[box] = {**updates.get(box, {}), "open": values["constraint"] != "none"}
        choices = self.choices(values)
        for key in ("strategy", "cache", "weights"):
            updates[self.knobs[key]] = {**choices[self.knobs[key]], "value": values[key]}
        return updates

    def choices(self, values: ColumnValues) -> Updates:
        """The strategy, cache and weights dropdowns: refused choices marked, the chosen entry's help underneath."""
        strategy, cache = values["strategy"], values["cache"]
        return {self.knobs["weights"]: gr.update(choices=weights_choices(values["backend"])),
                self.knobs["strategy"]: gr.update(choices=strategy_choices(values["backend"], cache),
                                                  info=registry.strategy(strategy).help),
                self.knobs["cache"]: gr.update(choices=cache_choices(values["backend"], strategy),
                                               info=registry.cache_type(cache).help)}

    def structure(self, values: ColumnValues) -> Updates:
        """Groups shown/hidden and the notice, for the current control values."""
        shown = visibility(values["strategy"], values["cache"], values["backend"], values,
                           values["assisted_sampling"])
        updates: Updates = {self.groups[name]: gr.update(visible=flag) for name, flag in shown.items()}
        updates[self.notice] = notice_text(column_settings(values))
        states = {**stage_knob_states(values["strategy"]),
                  **store_knob_states(values["backend"], values["weights"], values["strategy"], values["cache"])}
        for name, (usable, info) in states.items():
            updates[self.knobs[name]] = gr.update(interactive=usable, info=info)
        return updates


def _choice_controls(index: int, knobs: dict[str, Any], values: ColumnValues) -> None:
    """Model, weights, strategy, cache, backend and length: shown for every choice."""
    with gr.Row():
        knobs["model"] = gr.Dropdown(model_choices(), value=values["model"], label="model",
                                     allow_custom_value=True, elem_id=f"model-{index}", scale=3, min_width=120)
        knobs["weights"] = gr.Dropdown(weights_choices(values["backend"]), value=values["weights"], label="weights",
                                       elem_id=f"weights-{index}", scale=2, min_width=80)
    with gr.Row():
        knobs["strategy"] = gr.Dropdown(strategy_choices(values["backend"], values["cache"]), value=values["strategy"],
                                        label="strategy", elem_id=f"strategy-{index}", min_width=110,
                                        info=registry.strategy(values["strategy"]).help)
        knobs["cache"] = gr.Dropdown(cache_choices(values["backend"], values["strategy"]), value=values["cache"],
                                     label="KV cache", elem_id=f"cache-{index}", min_width=110,
                                     info=registry.cache_type(values["cache"]).help)
    knobs["backend"] = gr.Radio(offered(registry.backend_names(), 0), value=values["backend"], label="backend",
                                elem_id=f"backend-{index}")
    knobs["max_new_tokens"] = slider("max_new_tokens", index, 1, max_new_tokens_cap(), 1, "max new tokens", values)


def build_settings(index: int) -> tuple[gr.Column, dict[str, Any], dict[str, Any], gr.Markdown, gr.Button,
                                        gr.Markdown]:
    """The settings card: always-on choices first, then only the knobs the choice needs; the first columns start
    from START_SETTINGS (set when the page is built, so nothing overwrites a user's first clicks)."""
    values = control_values(START_SETTINGS[index] if index < len(START_SETTINGS) else {})
    shown = visibility(values["strategy"], values["cache"], values["backend"], values,
                       values["assisted_sampling"])
    knobs: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    with gr.Column(visible=index < START_COLUMNS, min_width=250,
                   elem_classes=["run-card", f"card-{index}"]) as box:
        with gr.Row(elem_classes=["card-head"]):
            title = gr.Markdown(f"### Column {index + 1}", elem_classes=title_classes(index))
            remove = gr.Button("✕", size="sm", scale=0, min_width=36, elem_id=f"remove-{index}",
                               elem_classes=["remove-btn"])
        _choice_controls(index, knobs, values)
        strategy_knobs(index, knobs, groups, values, shown)
        cache_knobs(index, knobs, groups, values, shown)
        constraint_knobs(index, knobs, groups, values)
        with gr.Accordion("more: min tokens, penalties against repetition", open=False):
            knobs["min_new_tokens"] = slider("min_new_tokens", index, 0, max_new_tokens_cap(), 1,
                                             "min new tokens", values)
            with gr.Group(visible=shown["penalty_knobs"]) as groups["penalty_knobs"]:
                chain_widgets(index, knobs, PENALTIES, values)
        notice = gr.Markdown("", elem_classes=["notice"], elem_id=f"notice-{index}")
    return box, knobs, groups, title, remove, notice


def build_output(index: int) -> tuple[gr.Column, gr.Textbox, gr.Chatbot, gr.HTML, gr.HTML, gr.Slider, gr.HTML,
                                     gr.HTML, gr.HTML, ColdTtft]:
    """The output card: plain text (the id scripts read), the chat transcript in chat mode, the token view."""
    with gr.Column(visible=index < START_COLUMNS, min_width=250,
                   elem_classes=output_classes(index, index)) as box:
        output = gr.Textbox(label=f"column {index + 1} output", lines=6, max_lines=14, elem_id=f"output-{index}",
                            interactive=False, buttons=["copy"])
        chatbot = gr.Chatbot(label=f"column {index + 1} conversation", height=300, visible=False,
                             elem_id=f"chat-{index}", feedback_options=None)
        cold = cold_ttft_controls(index)
        tokens = gr.HTML("", elem_id=f"tokens-{index}", elem_classes=["token-view"], js_on_load=PICK_TOKEN_JS)
        view_box = gr.HTML("", elem_id=f"{VIEW_BOX_ID}-{index}", elem_classes=[VIEW_BOX_ID], visible=False,
                           js_on_load=None)
        cache_step = gr.Slider(1, 2, value=1, step=1, label="KV cache at step", elem_id=f"cache-step-{index}",
                               visible=False, info="what a sliding, sink or quantized cache holds at that step")
        cache_strip = gr.HTML("", elem_id=f"cache-strip-{index}", visible=False, js_on_load=None)
        step_candidates, branches = step_views(index)
    return box, output, chatbot, tokens, view_box, cache_step, cache_strip, step_candidates, branches, cold


def wire(col: ColumnControls) -> None:
    """Layout-only events (outside the queue): show the knobs that apply, relabel refused choices, flag problems."""
    inputs = set(col.knobs.values())
    structural = ("backend", "strategy", "cache", "weights", *(k for part in card_parts() for k in part.structural))
    # disabled under some strategies, or some weights (the bf16 store); the bits' notes follow the backend
    limited = [col.knobs[name] for name in (*stage_knob_states("greedy"), *store_knob_states("torch", "fp32"))]

    @writes(col.groups.values(), col.notice, col.knobs["strategy"], col.knobs["cache"], col.knobs["weights"], limited)
    def restructure(data: Inputs) -> Updates:
        current = col.read(data)
        return {**col.structure(current), **col.choices(current)}

    @writes(col.notice)
    def renotice(data: Inputs) -> Updates:
        return {col.notice: notice_text(column_settings(col.read(data)))}

    for name, knob in col.knobs.items():
        if name in structural:
            on_private(knob.input, restructure, inputs)
        else:  # `change`, not `input`: Gradio's `input` misses a pasted, dropped or autofilled value
            on_private(knob.change, renotice, inputs, trigger_mode="always_last")

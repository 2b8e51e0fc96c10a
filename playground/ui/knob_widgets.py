"""A knob's widget drawn from its registry record alone: the logits chain's knobs need no code on the page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gradio as gr

from playground import registry
from playground.registry.builtin_knobs import MORE_SAMPLING, PENALTIES, SAMPLING

CHAIN_GROUPS = (SAMPLING, MORE_SAMPLING, PENALTIES)  # the logits chain's groups; any other is a strategy's


def chain_knobs(group: str) -> tuple[str, ...]:
    """The knobs of a group of the logits chain's widgets (SAMPLING, PENALTIES), as registered."""
    return tuple(knob.name for knob in registry.knobs() if knob.group == group)


# a widget's narrowest width in a row of two: narrower, the row puts it under the other, so that with three or four
# columns on a laptop each knob's help wraps to two or three lines rather than ten
WIDGET_MIN_WIDTH = 260


def knob_widget(knob: registry.Knob, index: int, value: Any, visible: bool = True, note: str = "",
                elem_id: str = "") -> Any:
    """A knob's widget from its record alone: a dropdown of its choices, a slider over the knob's own range (its
    first step where the low end is refused), a number box, a text box or a checkbox; `note` follows its help;
    `elem_id` replaces the column's `<knob>-<index>`."""
    info = " · ".join(part for part in (knob.help, note) if part)
    common: dict[str, Any] = {"label": knob.title, "info": info or None, "elem_id": elem_id or f"{knob.name}-{index}",
                              "visible": visible, "min_width": WIDGET_MIN_WIDTH}
    if knob.choices:
        return gr.Dropdown(list(knob.choices), value=value, **common)
    if knob.kind is bool:
        return gr.Checkbox(value, **common)
    if knob.kind is str:
        return gr.Textbox(value, max_lines=1, **common)
    if knob.step is not None and knob.low is not None and knob.high is not None:
        low = knob.low + knob.step if knob.low_open else knob.low
        return gr.Slider(low, knob.high, value=value, step=knob.step, **common)
    return gr.Number(value, precision=0 if knob.kind is int else None, minimum=knob.low, maximum=knob.high,
                     **common)


def chain_widgets(index: int, knobs: dict[str, Any], group: str, values: Mapping[str, Any]) -> None:
    """The widgets of one group of the logits chain's knobs, two to a row, in registration order."""
    group_widgets(index, knobs, chain_knobs(group), values)


def group_widgets(index: int, knobs: dict[str, Any], names: tuple[str, ...], values: Mapping[str, Any],
                  notes: Mapping[str, str] | None = None) -> None:
    """The widgets of `names` from their records, two to a row; `notes` adds a line after a knob's help."""
    for start in range(0, len(names), 2):
        with gr.Row():
            for name in names[start:start + 2]:
                knobs[name] = knob_widget(registry.knob(name), index, values[name], note=(notes or {}).get(name, ""))


def strategy_groups() -> dict[str, tuple[str, ...]]:
    """The strategies' groups of the column card, `<group>_knobs` -> its knobs, as the knobs' records name them
    (every group but the logits chain's), in registration order."""
    found: dict[str, tuple[str, ...]] = {}
    for knob in registry.knobs():
        if knob.group and knob.group not in CHAIN_GROUPS:
            found[f"{knob.group}_knobs"] = (*found.get(f"{knob.group}_knobs", ()), knob.name)
    return found

"""Contrastive search's part of the column card: its candidates. It reads `top_k` as the number of candidates it
weighs, not as the sampling filter, so the page holds it under a key of its own (the filter's slider means
something else, and its default of 50 would batch 50 candidates per step)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gradio as gr

from playground import registry
from playground.registry.builtin import MAX_CONTRASTIVE_K
from playground.registry.builtin_knobs import CONTRASTIVE
from playground.ui.card_part import CardPart
from playground.ui.knob_widgets import WIDGET_MIN_WIDTH

# the page's own key for the candidates, and the paper's k
CANDIDATES, CANDIDATES_DEFAULT = "candidates", 4


def own_top_k(strategy: str, assisted_sampling: bool = False) -> bool:
    """Whether the strategy reads `top_k` as its own setting rather than as the sampling filter: then this
    control sets it, and the sampling knobs stay hidden."""
    entry = registry.strategy(strategy)
    return "top_k" in entry.knobs and not entry.samples(assisted_sampling)


class Candidates(CardPart):
    """The candidates slider, in the strategy's knob group."""

    group = f"{CONTRASTIVE}_knobs"
    defaults = {CANDIDATES: CANDIDATES_DEFAULT}

    def draw(self, index: int, knobs: dict[str, Any], groups: dict[str, Any], values: Mapping[str, Any],
             shown: Mapping[str, bool]) -> None:
        top_k = registry.knob("top_k")
        knobs[CANDIDATES] = gr.Slider(
            2, MAX_CONTRASTIVE_K, value=values[CANDIDATES], step=1, label="candidates (top_k)",
            elem_id=f"{CANDIDATES}-{index}", info=f"contrastive search weighs this many of the most likely "
            f"tokens per step, in one batched forward (RunSpec key {top_k.name})", min_width=WIDGET_MIN_WIDTH)

    def to_settings(self, values: Mapping[str, Any], settings: dict[str, Any]) -> None:
        if own_top_k(values["strategy"], bool(values.get("assisted_sampling"))):
            value = values[CANDIDATES]
            settings["top_k"] = int(value) if isinstance(value, float) and value.is_integer() else value

    def to_values(self, settings: Mapping[str, Any], values: dict[str, Any], defaults: Mapping[str, Any]) -> None:
        if own_top_k(values["strategy"], bool(values["assisted_sampling"])) and "top_k" in settings:
            values[CANDIDATES], values["top_k"] = settings["top_k"], defaults["top_k"]
        else:
            values[CANDIDATES] = defaults[CANDIDATES]


CANDIDATES_CARD = Candidates()

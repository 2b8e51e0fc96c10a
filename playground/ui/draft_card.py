"""Assisted decoding's part of the column card: where its drafts come from (a draft model or prompt lookup: one
radio shows the other's knob or not) and whether it samples. Widgets of its own, as the source is a choice between
two knobs that RunSpec holds apart."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gradio as gr

from playground.models.catalog import BUNDLED
from playground.ui.card_part import CardPart

DRAFT_MODEL, PROMPT_LOOKUP = "draft model", "prompt lookup"
DRAFT_KEYS = ("assistant", "prompt_lookup", "assisted_sampling")


class DraftSource(CardPart):
    """The draft source radio, the draft model or the n-gram length, and the sampling switch."""

    own_groups = {"draft_knobs": DRAFT_KEYS}
    # what the controls show while unused: a source ready to pick, not RunSpec's "none". Assisted decoding starts
    # from prompt lookup: the default draft model is the main model itself, whose every draft is accepted, so
    # nothing about verification would be seen
    defaults = {"assistant": "smollm2-135m", "prompt_lookup": 10, "draft_source": PROMPT_LOOKUP}
    structural = ("draft_source", "assisted_sampling")
    writes = DRAFT_KEYS

    def draw(self, index: int, knobs: dict[str, Any], groups: dict[str, Any], values: Mapping[str, Any],
             shown: Mapping[str, bool]) -> None:
        with gr.Group(visible=shown["draft_knobs"]) as groups["draft_knobs"]:
            knobs["draft_source"] = gr.Radio([DRAFT_MODEL, PROMPT_LOOKUP], value=values["draft_source"],
                                             label="draft tokens from", elem_id=f"draft_source-{index}")
            knobs["assistant"] = gr.Dropdown(list(BUNDLED), value=values["assistant"], label="draft model",
                                             allow_custom_value=True, elem_id=f"assistant-{index}",
                                             visible=shown["assistant"])
            knobs["prompt_lookup"] = gr.Slider(1, 64, value=values["prompt_lookup"], step=1,
                                               label="prompt lookup n-gram tokens", elem_id=f"prompt_lookup-{index}",
                                               visible=shown["prompt_lookup"])
            groups["assistant"], groups["prompt_lookup"] = knobs["assistant"], knobs["prompt_lookup"]
            knobs["assisted_sampling"] = gr.Checkbox(
                values["assisted_sampling"], label="sample (speculative sampling)",
                elem_id=f"assisted_sampling-{index}",
                info="off: greedy, the same text as greedy decoding · on: drafts accepted by the speculative-sampling "
                     "rule, so the text follows the sampling knobs above")

    def shown(self, values: Mapping[str, Any]) -> dict[str, bool]:
        lookup = values.get("draft_source", PROMPT_LOOKUP) == PROMPT_LOOKUP
        return {"assistant": not lookup, "prompt_lookup": lookup}

    def to_settings(self, values: Mapping[str, Any], settings: dict[str, Any]) -> None:
        if values.get("assisted_sampling"):  # left out when off, so a shared link stays as short as before
            settings["assisted_sampling"] = True
        if values.get("draft_source") == PROMPT_LOOKUP:
            value = values["prompt_lookup"]
            settings["prompt_lookup"] = int(value) if isinstance(value, float) and value.is_integer() else value
        else:
            settings["assistant"] = values["assistant"] or None

    def to_values(self, settings: Mapping[str, Any], values: dict[str, Any], defaults: Mapping[str, Any]) -> None:
        values["draft_source"] = DRAFT_MODEL if settings.get("assistant") and not settings.get("prompt_lookup") \
            else PROMPT_LOOKUP
        for key in ("prompt_lookup", "assistant"):
            if not values[key]:
                values[key] = defaults[key]


DRAFT_SOURCE = DraftSource()

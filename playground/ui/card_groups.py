"""A column's settings card below its choices: the strategies' knob groups (the sampling stages' and each
strategy's, drawn from their registry records by knob_widgets.py, with what each strategy's view adds: its
`CardPart`), then the caches' and the backends' (devices on JAX, torch.compile on PyTorch), each shown only where
the column's choice reads its knobs (columns.visibility)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gradio as gr

from playground import registry
from playground.backends.prefix_store import cold_reason
from playground.registry.builtin_knobs import MORE_SAMPLING, SAMPLING
from playground.spec import CACHE_BITS
from playground.ui.knob_widgets import chain_widgets, group_widgets, knob_widget, strategy_groups
from playground.ui.settings import ColumnValues
from playground.ui.strategy_view import card_parts


def slider(key: str, index: int, low: float, high: float, step: float, label: str, values: Mapping[str, Any],
           **kw: Any) -> gr.Slider:
    return gr.Slider(low, high, value=values[key], step=step, label=label, elem_id=f"{key}-{index}", **kw)


def strategy_knobs(index: int, knobs: dict[str, Any], groups: dict[str, Any], values: ColumnValues,
                   shown: Mapping[str, bool]) -> None:
    """The sampling stages' knobs, each strategy's group drawn from its knobs' records with what its view's card
    part adds there, then the parts' blocks of their own; each shown only where the column's choice reads its
    knobs."""
    with gr.Group(visible=shown["sampling_knobs"]) as groups["sampling_knobs"]:
        chain_widgets(index, knobs, SAMPLING, values)
        with gr.Accordion("more samplers: typical-p, epsilon and eta, top-nσ, XTC, the order", open=False):
            chain_widgets(index, knobs, MORE_SAMPLING, values)
    parts = card_parts()
    notes = {knob: note for part in parts for knob, note in part.notes.items()}
    for name, group in strategy_groups().items():
        with gr.Group(visible=shown[name]) as groups[name]:
            group_widgets(index, knobs, group, values, notes)
            for part in (part for part in parts if part.group == name):
                part.draw(index, knobs, groups, values, shown)
    for part in (part for part in parts if not part.group):
        part.draw(index, knobs, groups, values, shown)


SIDE_BITS_NOTE = "torch: 2 or 4 each (quanto), or 8 for both (fp8) · jax: 2, 4 or 8 each · 0: as cache bits"
SIDE_BITS_ON = {"torch": "0: as cache bits · on torch 2 or 4 each (quanto), or 8 for both (its fp8 layer)",
                "jax": "0: as cache bits · on jax 2, 4 or 8 each (its own groups of 64)"}
STORE_NOTE = "bf16: keys and values stored in bfloat16 (half the bytes), attention in fp32"


def store_knob_states(backend: str, weights: str, strategy: str = "greedy",
                      cache: str = "dynamic") -> dict[str, tuple[bool, str]]:
    """(interactive, info) of the store's knobs: each side's bits as this backend's quantizer takes them, the
    bf16 store off on bf16 weights, with why (their keys and values are bf16 already), and the prefix store's
    `reuse` off where the column's cache or strategy is not exact under reuse."""
    bf16_weights = weights == "bf16"
    store_info = STORE_NOTE + (" · off with bf16 weights: their keys and values are bf16 already" if bf16_weights
                               else "")
    sides = SIDE_BITS_ON.get(backend, SIDE_BITS_NOTE)
    return {"cache_key_bits": (True, sides), "cache_value_bits": (True, sides), "cache_dtype": (not bf16_weights,
                                                                                                store_info),
            **reuse_knob_state(strategy, cache, backend)}


def reuse_knob_state(strategy: str, cache: str, backend: str = "torch") -> dict[str, tuple[bool, str]]:
    """(interactive, info) of the reuse checkbox: off, with the reason, where the column's cache or strategy is not
    kept on its backend (its runs prefill the whole prompt)."""
    reason = cold_reason(strategy, cache, backend=backend)
    help_text = registry.knob("reuse").help
    return {"reuse": (True, help_text) if reason is None else (False, f"prefills whole: {reason}")}


def cache_knobs(index: int, knobs: dict[str, Any], groups: dict[str, Any], values: ColumnValues,
                shown: Mapping[str, bool]) -> None:
    """Quantized, window and sink knobs, each shown only for its cache; devices only for JAX, torch.compile only
    for PyTorch."""
    with gr.Group(visible=shown["bits_knobs"]) as groups["bits_knobs"]:
        with gr.Row():
            knobs["cache_bits"] = gr.Radio(list(CACHE_BITS), value=values["cache_bits"], label="cache bits",
                                           elem_id=f"cache_bits-{index}",
                                           info="2/4: + full-precision residual · 8: fp8 (torch), 8-bit groups (jax)")
            knobs["residual_length"] = gr.Number(values["residual_length"], precision=0, minimum=1,
                                                 label="full-precision residual (tokens)",
                                                 elem_id=f"residual_length-{index}")
        with gr.Row():
            for side in ("cache_key_bits", "cache_value_bits"):
                knob = registry.knob(side)
                knobs[side] = gr.Radio(list(knob.choices), value=values[side], label=knob.title,
                                       elem_id=f"{side}-{index}", info=SIDE_BITS_NOTE)
    with gr.Group(visible=shown["dtype_knobs"]) as groups["dtype_knobs"]:
        store = registry.knob("cache_dtype")
        knobs["cache_dtype"] = gr.Radio(list(store.choices), value=values["cache_dtype"], label=store.title,
                                        elem_id=f"cache_dtype-{index}", info=STORE_NOTE)
    with gr.Row(visible=shown["window_box"]) as groups["window_box"]:
        knobs["window"] = gr.Number(values["window"], precision=0, minimum=1, label="window (tokens)",
                                    elem_id=f"window-{index}")
        knobs["sink_tokens"] = gr.Number(values["sink_tokens"], precision=0, minimum=0, label="sink tokens",
                                         elem_id=f"sink_tokens-{index}", visible=shown["sink_tokens"])
        groups["sink_tokens"] = knobs["sink_tokens"]
    knobs["devices"] = slider("devices", index, 1, 8, 1, "devices (shards)", values, visible=shown["devices"])
    groups["devices"] = knobs["devices"]
    with gr.Group(visible=shown["torch_compile"]) as groups["torch_compile"]:  # the PyTorch path's own
        knobs["torch_compile"] = knob_widget(registry.knob("torch_compile"), index, values["torch_compile"])
    with gr.Group(visible=shown["reuse"]) as groups["reuse"]:  # the prefix store, on both backends
        knobs["reuse"] = knob_widget(registry.knob("reuse"), index, values["reuse"])


CONSTRAINT_HELP = ("regex: the whole output must match (Rust syntax, e.g. [0-9]{1,3}) · json_schema: a JSON schema "
                   "object · choice: one per line, or a|b|c · grammar: Lark, start rule `start`")


def constraint_knobs(index: int, knobs: dict[str, Any], groups: dict[str, Any], values: ColumnValues) -> None:
    """The constraint (the logits chain's first stage, on every strategy), folded away until it is set."""
    kind = registry.knob("constraint")
    with gr.Accordion("constraint: regex, JSON schema, choices, grammar", open=values["constraint"] != "none",
                      elem_id=f"constraint-box-{index}") as groups["constraint_box"]:
        knobs["constraint"] = gr.Dropdown(list(kind.choices), value=values["constraint"], label=kind.title,
                                          info=kind.help, elem_id=f"constraint-{index}")
        knobs["constraint_text"] = gr.Textbox(values["constraint_text"], lines=3, max_lines=12,
                                              label=registry.knob("constraint_text").title, info=CONSTRAINT_HELP,
                                              elem_id=f"constraint_text-{index}")

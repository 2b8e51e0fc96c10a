"""One-click column sets for the comparisons people ask for most."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from playground.spec import CACHES
from playground.ui.columns import MAX_COLUMNS

Columns = list[dict[str, Any]]
SHOOT_OUT_ORDER = ("dynamic", "static", "quantized", "sink", "sliding")  # most instructive first; 4 columns max


def _base(current: Mapping[str, Any]) -> dict[str, Any]:
    """What a preset keeps from column 1: the model, its weights and the length of the run."""
    return {"model": current.get("model", "smollm2-135m"), "weights": current.get("weights", "fp32"),
            "max_new_tokens": current.get("max_new_tokens", 64), "backend": "torch", "cache": "dynamic"}


def strategies(current: Mapping[str, Any]) -> tuple[Columns, str]:
    base = _base(current)
    return [
        {**base, "strategy": "greedy"},
        {**base, "strategy": "sampling", "temperature": 0.7, "top_k": 50, "top_p": 0.9},
        {**base, "strategy": "beam", "num_beams": 4},
    ], "Same model and seed: the most likely token, a sample, and the best of 4 beams."


def cache_shoot_out(current: Mapping[str, Any]) -> tuple[Columns, str]:
    base = {**_base(current), "strategy": "greedy"}
    shown = SHOOT_OUT_ORDER[:MAX_COLUMNS]
    knobs = {"quantized": {"cache_bits": 4}, "sink": {"window": 256, "sink_tokens": 4}, "sliding": {"window": 256}}
    columns = [{**base, "cache": cache, **knobs.get(cache, {})} for cache in shown]
    left = [c for c in CACHES if c not in shown]
    note = "Greedy on every cache: the text should match; speed and KV-cache size differ."
    if left:
        note += f" Not shown ({MAX_COLUMNS} columns at most): {', '.join(left)}."
    return columns, note


def torch_vs_jax(current: Mapping[str, Any]) -> tuple[Columns, str]:
    base = {**_base(current), "strategy": "greedy", "weights": "fp32"}
    torch_static = {**base, "cache": "static"}
    return [{**base, "cache": "dynamic"}, torch_static, {**torch_static, "backend": "jax"}], (
        "Greedy, fp32: PyTorch generate (dynamic and static cache) against the jitted JAX decoder; "
        "the tokens should be identical, the JAX column shows its compile time (0 once compiled).")


def beam_torch_vs_jax(current: Mapping[str, Any]) -> tuple[Columns, str]:
    base = {**_base(current), "strategy": "beam", "num_beams": 4, "num_return_sequences": 2, "weights": "fp32",
            "cache": "static"}
    return [base, {**base, "backend": "jax"}], (
        "Beam search, 4 beams, fp32: transformers' beam search against the same search as one jitted batch on "
        "JAX; the returned sequences, their scores and the beam trees should match, the JAX column is faster.")


def assisted(current: Mapping[str, Any]) -> tuple[Columns, str]:
    base = {**_base(current), "model": "gemma3-270m", "strategy": "greedy"}
    return [
        base,
        {**base, "strategy": "assisted", "assistant": "smollm2-135m"},
        {**base, "strategy": "assisted", "prompt_lookup": 10},
    ], ("Gemma-3-270M alone, with SmolLM2-135M drafting tokens, and with prompt-lookup drafts: greedy output "
        "stays the same, speed depends on the acceptance rate.")


PRESETS: dict[str, Callable[[Mapping[str, Any]], tuple[Columns, str]]] = {
    "Greedy vs sampling vs beam": strategies,
    "Cache shoot-out": cache_shoot_out,
    "PyTorch vs JAX": torch_vs_jax,
    "Beam on PyTorch vs JAX": beam_torch_vs_jax,
    "Assisted vs plain": assisted,
}

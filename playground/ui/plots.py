"""The DataFrames behind the page's native plots: decode speed, latency per arrival, KV-cache size per step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from playground.result import Result
from playground.ui.table import MIB, metric_value

PALETTE = ("#4f46e5", "#ea580c", "#059669", "#db2777")  # one colour per column slot, the same in every plot

def _frame(rows: list[dict[str, Any]], schema: dict[str, str]) -> pd.DataFrame:
    """Typed even when empty: the plot fixes its axis types (numeric or categorical) from the first frame it gets."""
    return pd.DataFrame(rows, columns=list(schema)).astype(schema)


def slot_name(slot: int) -> str:
    return f"column {slot + 1}"


def slot_colours(count: int) -> dict[str, str]:
    """Line colour per column slot; the card titles use the same colours."""
    return {slot_name(i): PALETTE[i % len(PALETTE)] for i in range(count)}


def _placeholders(count: int, x: str, y: str) -> list[dict[str, Any]]:
    """One empty point per column slot.

    Gradio's plot computes its colour domain when it first draws and keeps it across value updates, so every
    frame names all slots (the empty points are not drawn) and a column that appears later still gets its line.
    """
    return [{"column": slot_name(i), "run": "", x: 1, y: math.nan} for i in range(count)]


def throughput_frame(results: Sequence[Result | None], labels: Sequence[str | None]) -> pd.DataFrame:
    rows = [{"run": label, "tokens/s": metric_value(r, "tokens_per_s")}
            for label, r in zip(labels, results, strict=True) if metric_value(r, "tokens_per_s") is not None]
    return _frame(rows, {"run": "str", "tokens/s": "float64"})


def latency_frame(results: Sequence[Result | None], labels: Sequence[str | None]) -> pd.DataFrame:
    """ms per token at each arrival, placed at the token count it reached: one point per token on the PyTorch
    path, one per chunk where tokens arrive together (the JAX path, accepted drafts)."""
    rows = _placeholders(len(results), "token", "ms/token")
    for slot, (label, result) in enumerate(zip(labels, results, strict=True)):
        timeline = result["timeline"] if result else {"token_ms": [], "token_steps": [], "kv_cache_bytes": []}
        for step, ms in zip(timeline["token_steps"], timeline["token_ms"], strict=True):
            rows.append({"column": slot_name(slot), "run": label, "token": step, "ms/token": ms})
    return _frame(rows, {"column": "str", "run": "str", "token": "int64", "ms/token": "float64"})


def kv_frame(results: Sequence[Result | None], labels: Sequence[str | None]) -> pd.DataFrame:
    """KV-cache MiB after each decoding step (one token per step for greedy and sampling).

    Dynamic grows, static is flat from the start, quantized grows slower past its residual length.
    """
    rows = _placeholders(len(results), "decoding step", "KV cache (MiB)")
    for slot, (label, result) in enumerate(zip(labels, results, strict=True)):
        for step, size in enumerate(result["timeline"]["kv_cache_bytes"] if result else [], start=1):
            rows.append({"column": slot_name(slot), "run": label, "decoding step": step, "KV cache (MiB)": size / MIB})
    return _frame(rows, {"column": "str", "run": "str", "decoding step": "int64", "KV cache (MiB)": "float64"})

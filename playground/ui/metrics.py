"""The comparison table (best value per row marked) and the DataFrames behind the page's native plots."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from playground.result import Result

MIB = 2**20
PALETTE = ("#4f46e5", "#ea580c", "#059669", "#db2777")  # one colour per column slot, the same in every plot

# (label with unit, how to read it from a Result, whether lower is better; None: not ranked)
METRIC_ROWS: list[tuple[str, str, bool | None]] = [
    ("TTFT (s)", "ttft_s", True),
    ("decode speed (tok/s)", "tokens_per_s", False),
    ("ms/token p50 (ms)", "ms_per_token_p50", True),
    ("ms/token p90 (ms)", "ms_per_token_p90", True),
    ("compile (s)", "compile_s", True),
    ("load (s)", "load_s", True),
    ("total (s)", "total_s", True),
    ("new tokens", "new_tokens", None),
    ("forward passes", "forward_passes", True),
    ("KV cache (MiB)", "kv_cache_bytes", True),
    ("peak RSS (MiB)", "peak_rss_bytes", True),
    ("draft acceptance (%)", "acceptance_rate", False),
]


def metric_value(result: Result | None, key: str) -> float | int | None:
    """A row's number for one run, in the row's unit; None when the run has no such figure."""
    if not result:
        return None
    if key == "new_tokens":
        return result["new_tokens"]
    if key == "forward_passes":
        return result["forward_passes"]
    metrics: Mapping[str, Any] = result["metrics"]
    value = metrics.get(key)
    if value is None:
        return None
    if key.endswith("_bytes"):
        return value / MIB
    if key == "acceptance_rate":
        return 100.0 * value
    return value


def format_number(value: float | int | None) -> str:
    """Three significant figures without scientific notation: tables are read, not parsed."""
    if value is None:
        return "–"
    if isinstance(value, int):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.01 or magnitude == 0:
        return f"{value:.2f}"
    return f"{value:.2g}"


def best_index(values: Sequence[float | int | None], lower_better: bool | None) -> set[int]:
    """Columns holding the row's best value; none when fewer than two runs have one (nothing to compare)."""
    present = [v for v in values if v is not None]
    if lower_better is None or len(present) < 2 or len(set(present)) == 1:
        return set()
    best = min(present) if lower_better else max(present)
    return {i for i, v in enumerate(values) if v == best}


def metrics_table(results: Sequence[Result | None], labels: Sequence[str]) -> dict[str, Any]:
    """Rows are metrics, columns are runs; the best value per row is bold with a ★."""
    rows = []
    for label, key, lower_better in METRIC_ROWS:
        values = [metric_value(r, key) for r in results]
        if key == "acceptance_rate" and all(v is None for v in values):
            continue  # only meaningful when some column is assisted
        best = best_index(values, lower_better)
        cells = [f"**★ {format_number(v)}**" if i in best else format_number(v) for i, v in enumerate(values)]
        rows.append([label] + cells)
    return {"headers": ["metric"] + list(labels), "data": rows}


def empty_metrics() -> dict[str, Any]:
    return {"headers": ["metric", "column 1", "column 2"], "data": [[label, "–", "–"] for label, _, _ in METRIC_ROWS
                                                                     if not label.startswith("draft")]}


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
    """ms per decoded token by step, one line per column slot; a compiled path shows its compile spike first."""
    rows = _placeholders(len(results), "step", "ms/token")
    for slot, (label, result) in enumerate(zip(labels, results, strict=True)):
        for step, ms in enumerate(result["timeline"]["token_ms"] if result else [], start=1):
            rows.append({"column": slot_name(slot), "run": label, "step": step, "ms/token": ms})
    return _frame(rows, {"column": "str", "run": "str", "step": "int64", "ms/token": "float64"})


def kv_frame(results: Sequence[Result | None], labels: Sequence[str | None]) -> pd.DataFrame:
    """KV-cache MiB after each decoding step (one token per step for greedy and sampling).

    Dynamic grows, static is flat from the start, quantized grows slower past its residual length.
    """
    rows = _placeholders(len(results), "decoding step", "KV cache (MiB)")
    for slot, (label, result) in enumerate(zip(labels, results, strict=True)):
        for step, size in enumerate(result["timeline"]["kv_cache_bytes"] if result else [], start=1):
            rows.append({"column": slot_name(slot), "run": label, "decoding step": step, "KV cache (MiB)": size / MIB})
    return _frame(rows, {"column": "str", "run": "str", "decoding step": "int64", "KV cache (MiB)": "float64"})

"""The DataFrames behind the page's native plots: decode speed, latency per arrival, KV-cache size per step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from playground.result import Result
from playground.ui.table import MIB, metric_value

PALETTE = ("#4f46e5", "#ea580c", "#059669", "#db2777")  # one colour per column position: cards, lines and bars
MIN_STEP_SPAN = 24  # a step axis spans at least this many steps, so its ticks fall on whole steps (1, 2, 5, ...)
STEP_FORMAT = "d"  # step axes count tokens: whole numbers only
# the latency axis in SI units ("1.5k"): on a busy machine its ticks reach thousands of ms, and "1,000" was cut to
# ",000" at the plot's left edge
LATENCY_FORMAT = "~s"
# the latency plot draws arrivals slower than OUTLIER_FACTOR x the 90th percentile at that height (latency_cap)
OUTLIER_FACTOR = 4
MIN_POINTS_TO_CAP = 10  # fewer arrivals than this have no meaningful percentile
DRAWN_MS = "ms/token (drawn)"  # the plotted height; the tooltip keeps the real "ms/token"
HEADROOM = 1.1  # the speed and KV plots' value axes reach this far past their largest value (value_limits)
BAR_CHARS = 22  # characters of a column's name under its speed bar

def _frame(rows: list[dict[str, Any]], schema: dict[str, str]) -> pd.DataFrame:
    """Typed even when empty: the plot fixes its axis types (numeric or categorical) from the first frame it gets."""
    return pd.DataFrame(rows, columns=list(schema)).astype(schema)


def series_name(position: int) -> str:
    """A column's series in the plots: its number on the page (0-based position among the visible columns).
    Short, so four of them fit a legend (and a bar axis) on a 390 px phone, where "column 4" was cut to "co"."""
    return f"col {position + 1}"


def bar_name(label: str) -> str:
    """A column's bar on the speed plot: its name ("1: sampling · dynamic · top-k 5"), cut to BAR_CHARS so that
    four fit a phone's axis at an angle (the tooltip gives the whole name). The number keeps it unique."""
    return label if len(label) <= BAR_CHARS else label[:BAR_CHARS - 1].rstrip(" ·") + "…"


def series_colours(count: int) -> dict[str, str]:
    """Line colour per column position; the cards use the same colours (ui.style), following their position."""
    return {series_name(i): PALETTE[i % len(PALETTE)] for i in range(count)}


def _placeholders(count: int, x: str, y: str) -> list[dict[str, Any]]:
    """One empty point per column position.

    Gradio's plot computes its colour domain when it first draws and keeps it across value updates, so every
    frame names all positions (the empty points are not drawn) and a column that appears later still gets its
    line.
    """
    return [{"column": series_name(i), "run": "", x: 1, y: math.nan} for i in range(count)]


def _drawn(results: Sequence[Result | None], labels: Sequence[str | None],
           positions: Sequence[int | None]) -> list[tuple[int, str, Result]]:
    """(position, label, result) of every column with a result, in slot order."""
    return [(position, label, result) for result, label, position in zip(results, labels, positions, strict=True)
            if result is not None and label is not None and position is not None]


def drawn_series(results: Sequence[Result | None], positions: Sequence[int | None]) -> list[str]:
    """The series names of the columns with a result (by slot), in position order: the step plots' legend."""
    return [series_name(p) for p in sorted(p for r, p in zip(results, positions, strict=True)
                                           if r is not None and p is not None)]


def step_axes(count: int, max_new_tokens: Sequence[int]) -> dict[str, Any]:
    """Legend and step range of the line plots for the columns about to run.

    Set before a run, never together with new data: Gradio redraws a plot whose legend or limits change, and a
    redraw that coincides with a data update can drop that update. The step axis runs to the longest column's
    max_new_tokens and at least MIN_STEP_SPAN steps, since Vega puts a tick about every 40 px, which over a
    short run means ticks at half steps.
    """
    return {"colors_in_legend": [series_name(i) for i in range(count)],
            "x_lim": [1, max([*max_new_tokens, MIN_STEP_SPAN])]}


def value_limits(values: Sequence[float] | pd.Series) -> list[float | None]:
    """The value (y) axis of the speed and KV plots: from 0 to HEADROOM times the largest drawn value.

    Sent after the plot's data (ui.run.plot_limits). A lower limit alone turns off Vega's rounding of the axis
    to a round number, so the axis ended exactly at the largest value: the tallest bar ran into the plot's top
    edge and a cache flat at its full size from the first step (JAX's static cache) was drawn on the border.
    Without a positive drawn value the top is left to Vega ([0, None]).
    """
    drawn = [float(v) for v in values if v is not None and math.isfinite(v)]
    top = max(drawn, default=0.0)
    return [0.0, top * HEADROOM] if top > 0 else [0.0, None]


def throughput_frame(results: Sequence[Result | None], labels: Sequence[str | None],
                     positions: Sequence[int | None]) -> pd.DataFrame:
    """Decode speed per column, coloured like its card and lines; positions without a result are named but not
    drawn. All three sequences are by column slot."""
    rows = [{"column": series_name(position), "bar": bar_name(label), "run": label,
             "tokens/s": metric_value(result, "tokens_per_s")}
            for position, label, result in _drawn(results, labels, positions)
            if metric_value(result, "tokens_per_s") is not None]
    # the empty positions stack a zero on a drawn bar, so they add a colour to the domain but no empty category
    # (a NaN would make the whole stack NaN and hide the bar; with no bar at all, a zero would set the axis)
    anchor, empty = (rows[0]["bar"], 0.0) if rows else ("", math.nan)
    drawn = {row["column"] for row in rows}
    rows += [{"column": series_name(i), "bar": anchor, "run": "", "tokens/s": empty}
             for i in range(len(results)) if series_name(i) not in drawn]
    return _frame(rows, {"column": "str", "bar": "str", "run": "str", "tokens/s": "float64"})


def latency_frame(results: Sequence[Result | None], labels: Sequence[str | None],
                  positions: Sequence[int | None]) -> pd.DataFrame:
    """ms per token at each arrival, placed at the token count it reached: one point per token on the PyTorch
    path, one per chunk where tokens arrive together (the JAX path, accepted drafts)."""
    cap = latency_cap(results) or math.inf
    rows = [{**row, DRAWN_MS: math.nan} for row in _placeholders(len(results), "token", "ms/token")]
    for position, label, result in _drawn(results, labels, positions):
        timeline = result["timeline"]
        for step, ms in zip(timeline["token_steps"], timeline["token_ms"], strict=True):
            rows.append({"column": series_name(position), "run": label, "token": step, "ms/token": ms,
                         DRAWN_MS: min(ms, cap)})
    return _frame(rows, {"column": "str", "run": "str", "token": "int64", "ms/token": "float64",
                         DRAWN_MS: "float64"})


def latency_cap(results: Sequence[Result | None]) -> float | None:
    """The top of the latency plot's axis when a few slow arrivals (a first-use stall, a busy moment) would
    flatten every line: OUTLIER_FACTOR times the 90th percentile over all drawn arrivals; None when the slowest
    arrival is within it."""
    values = sorted(ms for result in results if result is not None for ms in result["timeline"]["token_ms"])
    if len(values) < MIN_POINTS_TO_CAP:
        return None
    cap = OUTLIER_FACTOR * values[int(0.9 * (len(values) - 1))]
    return cap if values[-1] > cap > 0 else None


def latency_note(results: Sequence[Result | None]) -> str:
    """Under the latency plot: which arrivals are drawn at its top edge, and how slow they really were."""
    cap = latency_cap(results)
    if cap is None:
        return ""
    slow = [ms for result in results if result is not None for ms in result["timeline"]["token_ms"] if ms > cap]
    return (f"{len(slow)} arrival{'' if len(slow) == 1 else 's'} slower than {cap:,.0f} ms ({OUTLIER_FACTOR}× the "
            f"90th percentile; the slowest {max(slow):,.0f} ms) drawn at the top edge, so the other points keep "
            "their scale; hover a point for its real time")


def kv_frame(results: Sequence[Result | None], labels: Sequence[str | None],
             positions: Sequence[int | None]) -> pd.DataFrame:
    """KV-cache MiB after each decoding step (one token per step for greedy and sampling).

    Dynamic grows, static is flat from the start, quantized grows slower past its residual length.
    """
    rows = _placeholders(len(results), "decoding step", "KV cache (MiB)")
    for position, label, result in _drawn(results, labels, positions):
        for step, size in enumerate(result["timeline"]["kv_cache_bytes"], start=1):
            rows.append({"column": series_name(position), "run": label, "decoding step": step,
                         "KV cache (MiB)": size / MIB})
    return _frame(rows, {"column": "str", "run": "str", "decoding step": "int64", "KV cache (MiB)": "float64"})

"""The sweep tab's plot data, from a sweep's JSON object (finished or still growing): a curve per measure with its
spread, a quality-against-speed scatter, the per-value table, and which row a clicked point stands for."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from playground.sweep import knobs as sweep_knobs
from playground.ui.plots import PALETTE

MIB = 2**20
SPREAD_COLOUR = "#9ca3af"  # the lowest and highest rows of a value: grey beside the median's colour
SERIES = ("lowest", "highest", "median")  # in drawing order: the median's line on top
LEGEND = ("median", "lowest", "highest")
SERIES_COLOURS = {"median": PALETTE[0], "lowest": SPREAD_COLOUR, "highest": SPREAD_COLOUR}
Row = dict[str, Any]


def _always(knob: str, strategy: str) -> bool:
    return True


@dataclass(frozen=True)
class Measure:
    key: str
    title: str  # the y-axis title and the frame's column: short, so Vega draws it whole beside a 260 px plot
    label: str  # what it is, in words: the plot's label above it
    read: Callable[[Row], float | None]
    # (knob, strategy) -> whether a sweep of that knob on that strategy can move it: a plot it cannot is hidden
    moves: Callable[[str, str], bool] = _always


def _metric(name: str, scale: float = 1.0) -> Callable[[Row], float | None]:
    def read(row: Row) -> float | None:
        value = row["metrics"].get(name)
        return None if value is None else float(value) / scale
    return read


def _measure(name: str) -> Callable[[Row], float | None]:
    def read(row: Row) -> float | None:
        value = row["measures"].get(name)
        return None if value is None else float(value)
    return read


# one line plot each, in page order (element ids sweep-plot-0 ... ); the scatter comes after them
MEASURES = (
    Measure("tokens_per_s", "tokens/s", "decode speed (tokens/s)", _metric("tokens_per_s")),
    Measure("distinct_2", "distinct-2", "distinct-2 (distinct / all bigrams)", _measure("distinct_2")),
    Measure("repeat_4gram_rate", "repeated 4-grams", "4-grams seen earlier in the run (share)",
            _measure("repeat_4gram_rate")),
    Measure("mean_logprob", "nats/token", "mean log-probability per token", _measure("mean_logprob")),
    Measure("agreement", "agreed prefix", "tokens equal to greedy before the first difference (share)",
            _measure("agreement"), lambda knob, strategy: sweep_knobs.follows_greedy(strategy)),
    Measure("kv_cache_mib", "KV cache (MiB)", "KV cache at the end of a run (MiB)",
            _metric("kv_cache_bytes", MIB), lambda knob, strategy: sweep_knobs.moves_kv_cache(knob)),
    Measure("tokens_per_pass", "tokens per pass", "new tokens per forward pass",
            _measure("tokens_per_pass"), lambda knob, strategy: sweep_knobs.moves_tokens_per_pass(strategy)),
    Measure("returned_overlap", "returned overlap", "how alike the returned sequences are (word LCS; 1: the same)",
            _measure("returned_overlap"), lambda knob, strategy: sweep_knobs.returns_several(strategy)),
)
BY_KEY = {m.key: m for m in MEASURES}
SCATTER_SPEED = "tokens/s (median)"


def shown(knob: str, strategy: str) -> list[bool]:
    """Per line plot, whether a sweep of `knob` on `strategy` shows it: a temperature cannot change the KV cache's
    size nor the tokens a pass makes, and a sampled run agrees with greedy only by chance, so those curves would be
    flat lines (the table still lists them)."""
    return [measure.moves(knob, strategy) for measure in MEASURES]


def value_text(value: sweep_knobs.KnobValue) -> str:
    return value if isinstance(value, str) else f"{value:g}"


def _axis_value(knob: str, value: sweep_knobs.KnobValue) -> float | str:
    """Where a value sits on its plots' x axis: a number, or a category for a knob of names."""
    return str(value) if sweep_knobs.categorical(knob) else float(value)


def _rows_of(sweep: dict[str, Any], value: sweep_knobs.KnobValue) -> list[tuple[int, Row]]:
    return [(i, r) for i, r in enumerate(sweep["rows"]) if r["value"] == value]


def measure_frame(sweep: dict[str, Any], measure: Measure) -> pd.DataFrame:
    """Per value with rows: the median, lowest and highest of the measure over its prompts and seeds.

    Each series also gets a point without a height (not drawn): Gradio fixes a plot's colour domain when it
    first draws, so an empty plot must name all three series already.
    """
    knob = sweep["knob"]
    rows: list[dict[str, Any]] = [{knob: _axis_value(knob, sweep["values"][0]), "series": series,
                                   measure.title: math.nan}
                                  for series in SERIES]
    for value in sweep["values"]:
        present = [v for _, r in _rows_of(sweep, value) if (v := measure.read(r)) is not None]
        if not present:
            continue
        for series, y in zip(SERIES, (min(present), max(present), statistics.median(present)), strict=True):
            rows.append({knob: _axis_value(knob, value), "series": series, measure.title: y})
    axis = "str" if sweep_knobs.categorical(knob) else "float64"
    return pd.DataFrame(rows, columns=[knob, "series", measure.title]).astype(
        {knob: axis, "series": "str", measure.title: "float64"})


def quality_measure(knob: str) -> Measure:
    return BY_KEY[sweep_knobs.quality_measure(knob)]


def scatter_frame(sweep: dict[str, Any]) -> pd.DataFrame:
    """A point per value: median speed against the median of the knob's quality measure, labelled by its value;
    `row` is the row a click opens (the one nearest the median quality)."""
    knob = sweep["knob"]
    quality = quality_measure(knob)
    rows = []
    for value in sweep["values"]:
        mine = [(i, q, float(s)) for i, r in _rows_of(sweep, value)
                if (q := quality.read(r)) is not None and (s := r["metrics"].get("tokens_per_s")) is not None]
        if not mine:
            continue
        middle = statistics.median(m[1] for m in mine)
        nearest = min(mine, key=lambda m: abs(m[1] - middle))
        rows.append({SCATTER_SPEED: statistics.median(m[2] for m in mine), quality.title: middle,
                     knob: value_text(value), "row": nearest[0]})
    return pd.DataFrame(rows, columns=[SCATTER_SPEED, quality.title, knob, "row"]).astype(
        {SCATTER_SPEED: "float64", quality.title: "float64", knob: "str", "row": "int64"})


def padded_limits(values: pd.Series, share: float = 0.08, *, above_zero: bool = False) -> list[float] | None:
    """Axis limits a little wider than the values: a point at either end is drawn whole and clickable (Vega fits
    the domain to the data, which halves the extreme points), and a measure equal for every value gets readable
    ticks instead of one "1.000000"; None while there is nothing to draw. `above_zero` keeps a measure that
    cannot be negative (a share, a size) off negative ticks."""
    drawn = values.dropna()
    if drawn.empty:
        return None
    low, high = float(drawn.min()), float(drawn.max())
    margin = (high - low) * share or max(abs(high) * share, 0.05)
    bottom = max(low - margin, 0.0) if above_zero and low >= 0 else low - margin
    return [bottom, high + margin]


def aggregate_table(sweep: dict[str, Any]) -> pd.DataFrame:
    """The per-value medians, with units, as the page's table shows them."""
    columns = [("rows", "rows", 1), ("tokens/s", "tokens_per_s_median", 1), ("TTFT (s)", "ttft_s_median", 1),
               ("KV (MiB)", "kv_cache_bytes_median", MIB), ("distinct-2", "distinct_2_median", 1),
               ("rep. 4-grams", "repeat_4gram_rate_median", 1), ("log-prob", "mean_logprob_median", 1),
               ("agreed prefix", "agreement_median", 1), ("seeds' overlap (LCS)", "self_similarity_median", 1),
               ("tokens/pass", "tokens_per_pass_median", 1), ("returned overlap", "returned_overlap_median", 1),
               ("compile (s)", "compile_s_total", 1)]
    table = []
    for entry in sweep["aggregates"]:
        line: dict[str, Any] = {sweep["knob"]: value_text(entry["value"])}
        for title, key, scale in columns:
            value = entry.get(key)
            line[title] = None if value is None else round(float(value) / scale, 3)
        table.append(line)
    return pd.DataFrame(table, columns=[sweep["knob"], *(c[0] for c in columns)])


def row_label(sweep: dict[str, Any], index: int) -> str:
    row = sweep["rows"][index]
    return f"{sweep['knob']}={value_text(row['value'])} · prompt {row['prompt_index'] + 1} · seed {row['seed']}"


def _fields(label: str) -> dict[str, str]:
    """Vega's description of a mark ("x: 0.2; y: 0.51; series: median") as a dict."""
    return {k.strip(): v.strip() for k, _, v in (part.partition(":") for part in label.split(";")) if k.strip()}


def clicked_row(sweep: dict[str, Any] | None, plot: int, label: str) -> int | None:
    """The row a click on a plot's mark stands for: the scatter names it; a curve's point is a value and a
    series, so the row is that value's median, lowest or highest row for the plot's measure."""
    if not sweep or not sweep["rows"]:
        return None
    fields = _fields(label)
    if "row" in fields:
        found = re.match(r"-?\d+", fields["row"].replace(",", ""))
        index = int(found.group()) if found else -1
        return index if 0 <= index < len(sweep["rows"]) else None
    if not 0 <= plot < len(MEASURES) or sweep["knob"] not in fields:
        return None
    named = fields[sweep["knob"]]
    if sweep_knobs.categorical(sweep["knob"]):
        if named not in sweep["values"]:
            return None
        value = named
    else:
        try:
            x = float(named.replace(",", ""))
        except ValueError:
            return None
        value = min(sweep["values"], key=lambda v: abs(float(v) - x))
    measure = MEASURES[plot]
    mine = [(i, y) for i, r in _rows_of(sweep, value) if (y := measure.read(r)) is not None]
    if not mine:
        return None
    series = fields.get("series", "median")
    if series == "lowest":
        return min(mine, key=lambda m: m[1])[0]
    if series == "highest":
        return max(mine, key=lambda m: m[1])[0]
    middle = statistics.median(y for _, y in mine)
    return min(mine, key=lambda m: abs(m[1] - middle))[0]

"""The Context tab's plot data and tables, from the context command's JSON objects (one per cache and backend):
speed and KV memory against the context length, KL and top-1 agreement against the position, the numbers with
their units."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from playground import registry
from playground.metrics import busy_warning
from playground.ui.sweep_frames import MIB

CONTEXT = "context (tokens)"
SPEED = "tokens/s"
MEMORY = "KV cache (MiB)"
POSITION = "position"
KL = "KL (nats)"
TOP1 = "top-1 agreement"
ROOFLINE = "roofline"  # a run's roofline series: its name and this word
# one colour per run (a cache on a backend); its roofline the same colour, lighter
SERIES_PALETTE = ("#4f46e5", "#ea580c", "#059669", "#db2777", "#0891b2", "#ca8a04", "#7c3aed", "#dc2626",
                  "#65a30d", "#475569")
Result = dict[str, Any]


# a cache knob at one of these values changes nothing (the fp32 store; key and value bits as cache_bits): a name
# leaves it out, as "static (cache_dtype fp32)" would only repeat what every static cache is
UNCHANGED = {"cache_dtype": "fp32", "cache_key_bits": 0, "cache_value_bits": 0}


def series_name(spec: dict[str, Any]) -> str:
    """A run's name in the tables, the status line and the plots' tooltips: its cache, the knobs the cache reads
    (but those that change nothing), its backend."""
    knobs = ", ".join(f"{name} {value}" for name, value in spec["cache_knobs"].items()
                      if name not in UNCHANGED or UNCHANGED[name] != value)
    return f"{spec['cache']}{f' ({knobs})' if knobs else ''} · {spec['backend']}"


def legend_name(spec: dict[str, Any]) -> str:
    """A run's series in the plots and their legends: its cache and backend, which a plan holds once each. Short,
    since Vega cuts a legend label at 160 px ("sink (window 32, sink_tokens 4) · tor…" lost its backend)."""
    return f"{spec['cache']} · {spec['backend']}"


def _planned(specs: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"cache": s.cache, "backend": s.backend,
             "cache_knobs": {k: getattr(s, k) for k in registry.cache_type(s.cache).knobs}} for s in specs]


def planned_series(specs: Sequence[Any]) -> list[str]:
    """The runs a plan will measure (RunSpecs), in order, named as their results will be."""
    return [series_name(spec) for spec in _planned(specs)]


def planned_legend(specs: Sequence[Any]) -> list[str]:
    """The series a plan will draw, in order, as their results' rows will name them."""
    return [legend_name(spec) for spec in _planned(specs)]


def lighter(colour: str, share: float = 0.55) -> str:
    """`colour` (#rrggbb) mixed with white: a roofline beside its run's line."""
    red, green, blue = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * share):02x}" for c in (red, green, blue))


def colours(series: Sequence[str]) -> dict[str, str]:
    """Each run's colour, and its roofline's lighter one."""
    mapping: dict[str, str] = {}
    for i, name in enumerate(series):
        colour = SERIES_PALETTE[i % len(SERIES_PALETTE)]
        mapping[name] = colour
        mapping[f"{name} {ROOFLINE}"] = lighter(colour)
    return mapping


def _frame(rows: list[dict[str, Any]], schema: dict[str, str]) -> pd.DataFrame:
    """Typed even when empty: a plot fixes its axis types from the first frame it gets."""
    return pd.DataFrame(rows, columns=list(schema)).astype(schema)


def _placeholders(series: Sequence[str], x: str, y: str) -> list[dict[str, Any]]:
    """A point without a height per series (not drawn): a plot fixes its colour domain when it first draws, so
    every frame names every series the run will draw."""
    return [{"series": name, "run": "", x: 0.0, y: math.nan} for name in series]


def _schema(x: str, y: str) -> dict[str, str]:
    """A plot's columns: the series (its colour and legend entry), the run's full name (its tooltip), x and y."""
    return {"series": "str", "run": "str", x: "float64", y: "float64"}


def speed_frame(results: Sequence[Result], series: Sequence[str]) -> pd.DataFrame:
    """Decode tokens/s against the context length per run, and each run's roofline as a series of its own."""
    names = [n for name in series for n in (name, f"{name} {ROOFLINE}")]
    rows = _placeholders(names, CONTEXT, SPEED)
    for result in results:
        name, run = legend_name(result), series_name(result)
        for row in result.get("speed", []):
            rows.append({"series": name, "run": run, CONTEXT: float(row["context_tokens"]),
                         SPEED: math.nan if row["decode_tokens_per_s"] is None else row["decode_tokens_per_s"]})
            rows.append({"series": f"{name} {ROOFLINE}", "run": f"{run} {ROOFLINE}",
                         CONTEXT: float(row["context_tokens"]), SPEED: row["roofline_tokens_per_s"]})
    return _frame(rows, _schema(CONTEXT, SPEED))


def memory_frame(results: Sequence[Result], series: Sequence[str]) -> pd.DataFrame:
    """KV bytes (MiB) at the end of each length's run, against the context length."""
    rows = _placeholders(series, CONTEXT, MEMORY)
    for result in results:
        rows += [{"series": legend_name(result), "run": series_name(result), CONTEXT: float(row["context_tokens"]),
                  MEMORY: row["kv_bytes"] / MIB} for row in result.get("speed", [])]
    return _frame(rows, _schema(CONTEXT, MEMORY))


def _midpoint(bucket: dict[str, Any]) -> float:
    """A bucket's predicted positions [start, end) drawn at their middle."""
    return (bucket["start"] + bucket["end"] - 1) / 2


def quality_frame(results: Sequence[Result], series: Sequence[str], key: str, title: str) -> pd.DataFrame:
    """A quality figure (`kl_vs_full`, `top1_vs_full`) per bucket of positions, at the bucket's middle."""
    rows = _placeholders(series, POSITION, title)
    for result in results:
        if "quality" in result:
            rows += [{"series": legend_name(result), "run": series_name(result), POSITION: _midpoint(bucket),
                      title: bucket[key]} for bucket in result["quality"]["buckets"]]
    return _frame(rows, _schema(POSITION, title))


def frames(results: Sequence[Result], series: Sequence[str]) -> dict[str, pd.DataFrame]:
    """Every plot's data, by plot."""
    return {"speed": speed_frame(results, series), "memory": memory_frame(results, series),
            "kl": quality_frame(results, series, "kl_vs_full", KL),
            "top1": quality_frame(results, series, "top1_vs_full", TOP1)}


def empty_frames() -> dict[str, pd.DataFrame]:
    return frames([], [])


SPEED_COLUMNS = ("run", "context (tokens)", "prefill (s)", "prefill (tokens/s)", "decode (tokens/s)",
                 "roofline (tokens/s)", "of roofline (%)", "KV cache (MiB)", "peak RSS (MiB)")
def measured(results: Sequence[Result]) -> dict[str, bool]:
    """Which plots and tables have anything to draw: a quality-only run, or one stopped before its speed rows,
    has no speed; a speed-only one no quality. What has nothing is hidden rather than drawn empty."""
    return {"speed": any(result.get("speed") for result in results),
            "quality": any(result.get("quality", {}).get("buckets") for result in results)}


def legend_html(results: Sequence[Result], series: Sequence[str]) -> str:
    """The runs drawn so far, each with its colour, above the plots. The page's own legend rather than Vega's:
    it wraps where Vega's one row cut a fourth run at 390 px, and it lists only runs with data (a run that was
    stopped before it finished has none)."""
    mapping = colours(series)
    drawn = list(dict.fromkeys(legend_name(result) for result in results))
    keys = "".join(f"<span class='context-key'><i style='background:{mapping.get(name, '#64748b')}'></i>"
                   f"{html.escape(name)}</span>" for name in drawn)
    roofline = ("<span class='context-key-note'>a lighter line of the same colour: that run's roofline</span>"
                if measured(results)["speed"] else "")
    return f"<div class='context-legend'>{keys}{roofline}</div>" if drawn else ""


def load_note(results: Sequence[Result]) -> str:
    """The Compare tab's busy-machine line for the runs whose speed was measured under load: their tokens/s say
    more about the other work than about the cache (a bounded cache can even seem to speed up from one length to
    the next). Quality does not depend on the machine, so a run that measured only quality gets none."""
    busy = [series_name(result) for result in results
            if result.get("speed") and (result.get("machine_load") or {}).get("busy")]
    if not busy:
        return ""
    return (busy_warning(", ".join(f"**{name}**" for name in busy)) + " Their speed figures are unreliable under "
            "load: a speed that rises or falls with the context may be the machine, not the cache.")


QUALITY_COLUMNS = ("run", "positions", "perplexity", "KL(full ‖ cache) (nats)", "top-1 agreement (%)")


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def speed_table(results: Sequence[Result]) -> pd.DataFrame:
    """A line per run and length: prefill, decode against its roofline, KV bytes and peak RSS, with units."""
    lines = []
    for result in results:
        for row in result.get("speed", []):
            decode, roofline = row["decode_tokens_per_s"], row["roofline_tokens_per_s"]
            lines.append((series_name(result), row["context_tokens"], _rounded(row["prefill_s"], 3),
                          _rounded(row["prefill_tokens_per_s"], 1), _rounded(decode, 1), _rounded(roofline, 1),
                          None if decode is None else round(100 * decode / roofline, 1),
                          round(row["kv_bytes"] / MIB, 2), round(row["peak_rss_bytes"] / MIB)))
    return pd.DataFrame(lines, columns=list(SPEED_COLUMNS))


def quality_table(results: Sequence[Result]) -> pd.DataFrame:
    """A line per run and bucket of positions, then the run's whole text: perplexity, KL and top-1 agreement."""
    lines = []
    for result in results:
        if "quality" not in result:
            continue
        quality, name = result["quality"], series_name(result)
        spans = [(f"{b['start']}-{b['end'] - 1}", b) for b in quality["buckets"]]
        for span, figures in [*spans, (f"all {quality['tokens'] - 1}", quality)]:
            lines.append((name, span, round(figures["ppl"], 3), float(f"{figures['kl_vs_full']:.4g}"),
                          round(100 * figures["top1_vs_full"], 1)))
    return pd.DataFrame(lines, columns=list(QUALITY_COLUMNS))

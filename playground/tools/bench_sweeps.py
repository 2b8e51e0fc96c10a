"""`bench --suite sweeps`: each of the page's sweep presets run twice in one process, so the table shows what a
first visitor waits for (model loads and compiles included) and what the preset costs once compiled, with the
medians that show the preset's effect."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from playground.sweep.knobs import quality_measure
from playground.sweep.presets import SWEEP_PRESETS
from playground.sweep.run import run_sweep


def run_sweep_suite(progress: Callable[[str], Any]) -> dict[str, Any]:
    """Per preset and attempt: seconds, rows, runs that compiled, and per value the median tokens/s, KV bytes
    and the measure the knob moves."""
    rows = []
    for name, preset in SWEEP_PRESETS.items():
        quality = quality_measure(preset.knob)
        for attempt in ("first", "again"):
            progress(f"{name}: {attempt} run")
            start = time.perf_counter()
            result = run_sweep(preset.sweep())
            seconds = time.perf_counter() - start
            medians = [{"value": a["value"], "tokens_per_s": a["tokens_per_s_median"],
                        "kv_cache_bytes": a["kv_cache_bytes_median"], quality: a[f"{quality}_median"]}
                       for a in result["aggregates"]]
            rows.append({"preset": name, "attempt": attempt, "seconds": round(seconds, 1),
                         "rows": len(result["rows"]), "runs_compiled": result["compiles"],
                         "compile_s": round(sum(a["compile_s_total"] for a in result["aggregates"]), 1),
                         "measure": quality, "medians": medians})
    return {"rows": rows}


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{'preset':<42} {'attempt':<7} {'s':>6} {'rows':>5} {'compiled':>8}  {'value: tok/s, KV MiB, measure'}"]
    for row in result["rows"]:
        per_value = "; ".join(f"{m['value']:g}: {m['tokens_per_s']:.1f}, {m['kv_cache_bytes'] / 2**20:.2f}, "
                              f"{m[row['measure']]:.3f}" for m in row["medians"])
        lines.append(f"{row['preset']:<42} {row['attempt']:<7} {row['seconds']:>6.1f} {row['rows']:>5} "
                     f"{row['runs_compiled']:>8}  {row['measure']}: {per_value}")
    return "\n".join(lines)

"""The comparison table: one row per figure, one column per run, and a ★ only where a difference is real.

A difference is real when the best value beats the next best by more than the spread of their repeated runs
(max - min), or, with a single run each, by more than SINGLE_RUN_MARGIN: two runs of the same setting differ
by tens of percent on a busy machine. A timing measured once on a machine the run flagged as busy is never
ranked, and no ranked figure includes compile or load time (those rows stand apart, unranked). Values that
display the same tie: tied columns share the star, and the row's label names them. Runs of different lengths
compare totals and forward passes per new token, and never their cache sizes, which grow with the text. A ranked
row without a star says why in its label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from playground.result import Result
from playground.sweep import measures

MIB = 2**20
SINGLE_RUN_MARGIN = 0.20
STAR_RULE = ("★ best in row, given only when it beats the next by more than the spread of repeated runs "
             f"(with one run: by more than {SINGLE_RUN_MARGIN:.0%}, and never for timings from a busy machine); "
             "columns that tie for best share it; runs of different lengths are compared per new token, or not "
             "at all; compile and load are never ranked")


def scroll_cue(columns: int) -> str:
    """The line over a table of `columns` run columns while it is wider than its box (ui.style shows it): a phone
    showed column 1 of 2, with nothing to say that another lay to its right."""
    return f"← scroll sideways for {'both columns' if columns == 2 else f'all {columns} columns'} →"


@dataclass(frozen=True)
class Row:
    """A figure of the table: its label with unit, where a Result has it, and which way is better."""

    label: str
    key: str
    lower_is_better: bool | None  # None: not ranked (it depends on what ran before, or on nothing to win)
    runs_key: str | None = None  # where repeated runs keep every value, for the spread


ROWS = (
    Row("TTFT, compile excluded (s)", "ttft_s", True, "ttft_s_runs"),
    Row("decode speed (tok/s)", "tokens_per_s", False, "tokens_per_s_runs"),
    Row("ms/token p50 (ms)", "ms_per_token_p50", True, "ms_per_token_p50_runs"),
    Row("ms/token p90 (ms)", "ms_per_token_p90", True, "ms_per_token_p90_runs"),
    Row("total, compile and load excluded (s)", "run_s", True, "run_s_runs"),
    Row("compile (s, first time only; not ranked)", "compile_s", None),
    Row("load (s, not ranked)", "load_s", None),
    Row("new tokens", "new_tokens", None),
    Row("forward passes", "forward_passes", True),
    Row("memory: weights + KV cache (MiB)", "memory_bytes", True),
    Row("KV cache (MiB)", "kv_cache_bytes", True),
    Row("draft acceptance (%)", "acceptance_rate", False),
    Row("quality: mean log-prob per token under fp32 (nats)", "mean_logprob", False),
    # what the chain's penalties against repetition move; no star: more variety is not better text by itself
    Row("text: distinct bigrams (share)", "distinct_2", None),
    Row("text: repeated 4-grams (share)", "repeat_4gram_rate", None),
    Row("leaves fp32 greedy at token", "greedy_divergence", None),
    Row("KL vs fp32 weights (nats)", "kl_vs_fp32", True),
    # a constraint's cost: not ranked, the mask does what it was asked to
    Row("constraint: steps where it took out the model's top token", "constraint_changed_steps", None),
    Row("constraint: probability mass removed per step (mean)", "constraint_mass_removed_mean", None),
)
# rows shown only when some column has the figure: acceptance (assisted), KL (weights other than fp32), the
# constraint's cost (constrained columns)
OPTIONAL_ROWS = ("acceptance_rate", "kl_vs_fp32", "constraint_changed_steps", "constraint_mass_removed_mean")
CONSTRAINT_FIGURES = {"constraint_changed_steps": "changed_steps", "constraint_mass_removed_mean": "mass_removed_mean"}
# when columns generated different numbers of tokens, totals and forward passes are compared per token, and the
# cache's size (it grows with the text) is not ranked: the column that stopped first would win it
TOTAL_PER_TOKEN = Row("total per token, compile and load excluded (ms)", "run_ms_per_token", True,
                      "run_ms_per_token_runs")
PER_TOKEN = {"run_s": TOTAL_PER_TOKEN,
             "forward_passes": Row("forward passes per new token", "forward_passes_per_token", True)}
GROWS_WITH_LENGTH = ("memory_bytes", "kv_cache_bytes")
DIFFERENT_LENGTHS = "no ★: runs of different lengths"
TIMINGS = ("ttft_s", "tokens_per_s", "ms_per_token_p50", "ms_per_token_p90", "run_s", "run_ms_per_token")


def _scaled(key: str, value: Any) -> float | int | None:
    if value is None:
        return None
    if key.endswith("_bytes"):
        return float(value) / MIB
    if key == "acceptance_rate":
        return 100.0 * value
    return value


def metric_value(result: Result | None, key: str) -> float | int | None:
    """A row's number for one run, in the row's unit; None when the run has no such figure."""
    if not result:
        return None
    metrics: Mapping[str, Any] = result["metrics"]
    if key == "new_tokens":
        return result["new_tokens"]
    if key == "forward_passes":
        return result["forward_passes"]
    if key == "memory_bytes":
        return _scaled(key, metrics["weight_bytes"] + metrics["kv_cache_bytes"])
    if key == "run_s":  # the generation's wall time without its compile (load is outside total_s already)
        return metrics["total_s"] - metrics["compile_s"]
    if key in ("run_ms_per_token", "forward_passes_per_token"):
        return _per_token(result, key)
    if key == "distinct_2":
        return measures.distinct_n(result["token_ids"], 2)
    if key == "repeat_4gram_rate":
        return measures.repeated_ngram_rate(result["token_ids"], 4)
    if key in CONSTRAINT_FIGURES:
        constraint: Mapping[str, Any] = result.get("constraint") or {}
        figure = constraint.get(CONSTRAINT_FIGURES[key])
        return figure if isinstance(figure, (int, float)) else None
    return _scaled(key, metrics.get(key))


def _per_token(result: Result, key: str) -> float | None:
    """The total (ms) or the forward passes per new token: runs of different lengths compared."""
    total: float | None = result["forward_passes"]
    if key == "run_ms_per_token":
        total = 1000.0 * (result["metrics"]["total_s"] - result["metrics"]["compile_s"])
    return total / result["new_tokens"] if total is not None and result["new_tokens"] else None


def metric_runs(result: Result | None, row: Row) -> list[float]:
    """Every repeated run's value of a row (empty with one run)."""
    if not result or row.runs_key is None:
        return []
    metrics: Mapping[str, Any] = result["metrics"]
    if row.key in ("run_s", "run_ms_per_token"):
        totals = metrics.get("total_s_runs") or []
        compiles = metrics.get("compile_s_runs") or [0.0] * len(totals)
        runs = [t - c for t, c in zip(totals, compiles, strict=False)]
        if row.key == "run_s":
            return runs
        return [1000.0 * r / result["new_tokens"] for r in runs] if result["new_tokens"] else []
    return [v for v in metrics.get(row.runs_key) or [] if v is not None]


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


def _spread(runs: Sequence[float]) -> float | None:
    return max(runs) - min(runs) if len(runs) > 1 else None


def best_columns(values: Sequence[float | int | None], lower_better: bool | None,
                 runs: Sequence[Sequence[float]] | None = None, busy: bool = False) -> tuple[list[int], str]:
    """The columns whose value is really the best in its row (several when they tie), or none with the reason (""
    where a row is not ranked or has fewer than two values).

    Columns tie when their values display the same. Real: the best beats the next best outside the tie by more
    than the spread of either's repeated runs, or by more than SINGLE_RUN_MARGIN of the next best's value when
    neither was repeated (and neither ran on a machine flagged busy: `busy`, for timings).
    """
    ranked = sorted((v, i) for i, v in enumerate(values) if v is not None)
    if lower_better is None or len(ranked) < 2:
        return [], ""
    if not lower_better:
        ranked.reverse()
    best, index = ranked[0]
    tied = [i for v, i in ranked if format_number(v) == format_number(best)]
    rest = [(v, i) for v, i in ranked if i not in tied]
    if not rest:
        return [], "no ★: the same" if len(tied) == 2 else "no ★: all the same"
    second, other = rest[0]
    spreads = [s for s in (_spread(runs[index]), _spread(runs[other])) if s is not None] if runs else []
    if not spreads and busy:
        return [], "no ★: one run each on a busy machine"
    if spreads:
        real, why = abs(best - second) > max(spreads), "no ★: within the runs' spread"
    else:
        real = abs(best - second) > SINGLE_RUN_MARGIN * abs(second)
        why = f"no ★: under {SINGLE_RUN_MARGIN:.0%} apart with one run each"
    return (sorted(tied), "") if real else ([], why)


def _rows(results: Sequence[Result | None]) -> list[Row]:
    """The rows that apply: acceptance only with an assisted column, KL only with a column not at fp32; totals and
    forward passes per token when counts differ, and the sizes that grow with the text then unranked."""
    lengths_differ = len({r["new_tokens"] for r in results if r}) > 1
    rows = []
    for row in ROWS:
        if row.key in OPTIONAL_ROWS and all(metric_value(r, row.key) is None for r in results):
            continue
        if lengths_differ and row.key in GROWS_WITH_LENGTH:
            row = Row(row.label, row.key, None)
        rows.append(PER_TOKEN.get(row.key, row) if lengths_differ else row)
    return rows


def _why(row: Row, results: Sequence[Result | None]) -> str:
    """Why a row that ranks when the columns' lengths match is not ranked now."""
    lengths_differ = len({r["new_tokens"] for r in results if r}) > 1
    return DIFFERENT_LENGTHS if lengths_differ and row.key in GROWS_WITH_LENGTH else ""


def _number(label: str) -> str:
    """A column's number on the page, from its name ("2: sampling · dynamic" -> "2")."""
    return label.split(":", 1)[0]


def _busy(results: Sequence[Result | None]) -> bool:
    """Some column ran on a machine it flagged as busy (other work took CPU time): its timings are noise."""
    return any(r is not None and (r.get("extra", {}).get("machine_load") or {}).get("busy") for r in results)


def metrics_table(results: Sequence[Result | None], labels: Sequence[str]) -> dict[str, Any]:
    """Rows are figures, columns are runs; a real best is bold with a ★, repeated runs show their spread, and a
    ranked row without a star says why."""
    data = []
    busy = _busy(results)
    for row in _rows(results):
        values = [metric_value(r, row.key) for r in results]
        runs = [metric_runs(r, row) for r in results]
        best, why = best_columns(values, row.lower_is_better, runs, busy=busy and row.key in TIMINGS)
        why = why or _why(row, results)
        if len(best) > 1:
            names = [_number(labels[i]) for i in best]
            why = "★ tie: " + ", ".join(names[:-1]) + " and " + names[-1]
        cells = []
        for i, (value, column_runs) in enumerate(zip(values, runs, strict=True)):
            never = row.key == "greedy_divergence" and value is None and results[i] is not None
            text = "never" if never else format_number(value)
            if len(column_runs) > 1:  # the median, and the range of the repeated runs
                text += f" ({format_number(min(column_runs))}–{format_number(max(column_runs))})"
            cells.append(f"**★ {text}**" if i in best else text)
        data.append([f"{row.label} · {why}" if why else row.label] + cells)
    return {"headers": ["metric"] + list(labels), "data": data}


def empty_metrics() -> dict[str, Any]:
    """The figures a run will fill in; no column heads until a column has a result."""
    rows = [row.label for row in ROWS if row.key not in OPTIONAL_ROWS]
    return {"headers": ["metric", "no results yet"], "data": [[label, ""] for label in rows]}


def process_memory_note(results: Sequence[Result | None]) -> str:
    """The process's peak resident memory: one figure for the page, since every column shares the process; and
    what the JAX engines' compiled programs take of it, against their bound."""
    peaks = [r["metrics"]["peak_rss_bytes"] for r in results if r and r["metrics"]["peak_rss_bytes"] is not None]
    if not peaks:
        return ""
    note = (f"The whole process's resident memory at its highest during these runs: {max(peaks) / MIB:.0f} MiB "
            "(Python, torch, JAX, every loaded model and kept program: all columns share one process, so this is "
            "not these runs' own memory; each column's weights and KV cache are in the table).")
    engines: dict[tuple[Any, Any, Any], tuple[int, int]] = {}  # the last figure per engine: columns run in turn
    for result in results:
        if result and "program_cache_bytes" in result["extra"]:
            key = (result["spec"]["model"], result["spec"]["devices"], result["spec"]["weights"])
            engines[key] = (result["extra"]["program_cache_bytes"], result["extra"]["program_cache_bound_bytes"])
    if engines:
        kept, bound = sum(b for b, _ in engines.values()), sum(b for _, b in engines.values())
        note += (f" Compiled JAX programs kept in memory: {kept / MIB:.0f} MiB of their {bound / MIB:.0f} MiB "
                 "bound (PLAYGROUND_PROGRAM_CACHE per model; older programs are dropped, and reload from disk).")
    return note

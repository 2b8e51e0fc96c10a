"""`bench --suite constraints`: what a constraint costs a run, on one prompt, through the runner as the page runs it.

Per backend and case (unconstrained greedy, a regex, a JSON schema, a choice list): tokens/s (the median of
`rounds` timed runs after a warm-up run), the time to compile the constraint's matcher (apart from the run, as
`compile_s` is), and the time per token of its mask: filling llguidance's bitmask, unpacking it over the
vocabulary and consuming the token, replayed over the run's own tokens. The ratio the JAX path is judged by is
`jax_json_schema_vs_jax` (target: 0.8); a row a backend refuses says why.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from playground.backends.base import eos_ids
from playground.constraints import grammar
from playground.constraints.examples import PERSON_PROMPT, PERSON_REGEX, PERSON_SCHEMA
from playground.constraints.matching import allowed_tokens, token_index
from playground.errors import PlaygroundError
from playground.models.loaded import LOADED
from playground.runner import run_to_result
from playground.spec import RunSpec

CASES: dict[str, tuple[str, str]] = {"unconstrained": ("none", ""), "regex": ("regex", PERSON_REGEX),
                                     "json_schema": ("json_schema", PERSON_SCHEMA),
                                     "choice": ("choice", "Alice Smith\nBob Jones\nCarol White")}
BACKENDS = ("torch", "jax")
ROUNDS = 3
COMPILES = 5  # matchers compiled per case, the median reported


def _values(model: str, backend: str, case: str, new_tokens: int) -> dict[str, Any]:
    kind, text = CASES[case]
    values: dict[str, Any] = {"model": model, "backend": backend, "max_new_tokens": new_tokens,
                              "cache": "static" if backend == "jax" else "dynamic"}
    return values if kind == "none" else {**values, "constraint": kind, "constraint_text": text}


def _mask_costs(model: str, case: str, ids: list[int], vocab: int) -> tuple[float, float]:
    """(median ms to compile the matcher, median ms per token of its mask and consume) over the run's tokens;
    `vocab` is the width of the run's logits, as its constraint record gives it."""
    kind, text = CASES[case]
    loaded = LOADED.get(model, "fp32")[0]
    eos = eos_ids(loaded.model.generation_config, loaded.tokenizer)
    index = token_index(loaded.tokenizer, vocab, eos)
    compiles = []
    for _ in range(COMPILES):
        start = time.perf_counter()
        matcher = grammar.matcher(index, kind, text)
        compiles.append((time.perf_counter() - start) * 1e3)
    steps = []
    for token in ids:
        start = time.perf_counter()
        allowed_tokens(matcher, vocab)
        if token not in eos:
            matcher.consume_token(token)
        steps.append((time.perf_counter() - start) * 1e3)
    return statistics.median(compiles), statistics.median(steps) if steps else 0.0


def _row(model: str, backend: str, case: str, new_tokens: int, rounds: int) -> dict[str, Any]:
    row: dict[str, Any] = {"backend": backend, "case": case}
    try:
        spec = RunSpec.from_dict(_values(model, backend, case, new_tokens))
    except PlaygroundError as exc:
        return {**row, "refused": str(exc)}
    run_to_result(PERSON_PROMPT, spec)  # loads and compiles
    result = run_to_result(PERSON_PROMPT, spec.replace(repeats=rounds))
    metrics = result["metrics"]
    row |= {"tokens_per_s": metrics["tokens_per_s"], "new_tokens": result["new_tokens"],
            "compile_s": metrics["compile_s"], "ttft_s": metrics["ttft_s"]}
    constraint = result.get("constraint")
    if constraint:
        compile_ms, mask_ms = _mask_costs(model, case, result["token_ids"], int(constraint["vocab_size"] or 0))
        row |= {"grammar_compile_ms": round(compile_ms, 3), "mask_ms_per_token": round(mask_ms, 4),
                "verdict": constraint["verdict"], "changed_steps": constraint["changed_steps"],
                "mass_removed_mean": constraint["mass_removed_mean"]}
    return row


def _ratio(rows: list[dict[str, Any]], backend: str, case: str) -> float | None:
    found = {r["case"]: r.get("tokens_per_s") for r in rows if r["backend"] == backend}
    mine, plain = found.get(case), found.get("unconstrained")
    return round(mine / plain, 3) if mine and plain else None


def run_constraint_suite(model: str, new_tokens: int, progress: Callable[[str], Any],
                         rounds: int = ROUNDS) -> dict[str, Any]:
    """Every backend x case, then the ratios of constrained to unconstrained greedy."""
    rows = []
    for backend in BACKENDS:
        for case in CASES:
            progress(f"{backend} {case}")
            rows.append(_row(model, backend, case, new_tokens, rounds))
    ratios = {f"{backend}_{case}_vs_{backend}": _ratio(rows, backend, case) for backend in BACKENDS
              for case in CASES if case != "unconstrained"}
    return {"model": model, "new_tokens": new_tokens, "rounds": rounds, "prompt": PERSON_PROMPT, "rows": rows,
            "ratios": ratios, "weights": "fp32"}


def format_table(result: dict[str, Any]) -> str:
    header = f"{'backend':<8} {'case':<14} {'tok/s':>8} {'tokens':>7} {'compile ms':>11} {'mask ms/tok':>12}  verdict"
    lines = [header]
    for row in result["rows"]:
        if "refused" in row:
            lines.append(f"{row['backend']:<8} {row['case']:<14} refused: {row['refused']}")
            continue
        compile_ms = row.get("grammar_compile_ms")
        mask = row.get("mask_ms_per_token")
        lines.append(f"{row['backend']:<8} {row['case']:<14} {row['tokens_per_s'] or 0:>8.1f} {row['new_tokens']:>7} "
                     f"{'-' if compile_ms is None else f'{compile_ms:.2f}':>11} "
                     f"{'-' if mask is None else f'{mask:.3f}':>12}  {row.get('verdict', '')}")
    lines.append("ratios: " + ", ".join(f"{k} {v}" for k, v in result["ratios"].items()))
    return "\n".join(lines)

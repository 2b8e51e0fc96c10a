"""`bench --suite compile`: what a first visitor waits for on each JAX cell of the page, at its defaults.

For each bundled model and each strategy x cache on the JAX path (RunSpec's defaults; assisted decoding by
prompt lookup of 10 tokens), the engine's programs are dropped and the request runs as a page column runs it:
`compile_s` is its tracing and compiling, TTFT its first token after that. Set PLAYGROUND_COMPILE_CACHE=0
for a cold compile (otherwise programs already on disk load instead); the weights are moved to the device
once per model, before the first cell, so no cell pays for that. The same request is then run again warm, for
the TTFT ratio. A cell the model cannot run is reported with its refusal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from playground import registry
from playground.backends.jax.engine import engine as jax_engine
from playground.errors import PlaygroundError
from playground.models.loaded import LOADED
from playground.runner import run_to_result
from playground.spec import RunSpec

MODELS = ("smollm2-135m", "gemma3-270m")
PROMPT = "What is the capital of France?"
DRAFTS = {"prompt_lookup": 10}  # the draft source for assisted cells (a draft model of another vocabulary
# would be refused on JAX for Gemma3)


def _drop_programs(model: str) -> None:
    """Every program of the model's engines, so the next request compiles (or loads from disk) all of its own."""
    jax_engine.drop_programs([loaded.model for loaded in LOADED.snapshot() if loaded.name == model])


def run_compile_suite(progress: Callable[[str], Any], models: tuple[str, ...] = MODELS) -> dict[str, Any]:
    """A row per model x strategy x cache: compile seconds, first and warm TTFT, or the refusal."""
    rows = []
    for model in models:
        run_to_result(PROMPT, RunSpec(model=model, backend="jax", cache="static", max_new_tokens=2))  # load, move
        for strategy in [s for s in registry.strategies() if s.plugin("jax") is not None]:  # a JAX cell per plug-in
            for cache in registry.caches():
                values = {"model": model, "backend": "jax", "strategy": strategy.name, "cache": cache.name,
                          **(DRAFTS if strategy.drafts else {})}
                row: dict[str, Any] = {"model": model, "strategy": strategy.name, "cache": cache.name}
                progress(f"{model}: {strategy.name} over {cache.name}")
                _drop_programs(model)
                try:
                    start = time.perf_counter()
                    first = run_to_result(PROMPT, RunSpec.from_dict(values))
                    row["first_request_s"] = round(time.perf_counter() - start, 2)
                    warm = run_to_result(PROMPT, RunSpec.from_dict(values))
                except PlaygroundError as exc:
                    row["refused"] = str(exc)
                    rows.append(row)
                    continue
                row |= {"compile_s": round(first["metrics"]["compile_s"], 2),
                        "ttft_first_s": _rounded(first["metrics"]["ttft_s"]),
                        "ttft_warm_s": _rounded(warm["metrics"]["ttft_s"]),
                        "programs": first["extra"].get("compiled_programs")}
                rows.append(row)
    return {"rows": rows}


def _rounded(seconds: float | None) -> float | None:
    """A TTFT to the millisecond; None where the strategy streams no first token (beam search)."""
    return None if seconds is None else round(seconds, 3)


def _cell(seconds: float | None, width: int) -> str:
    return f"{'-':>{width}}" if seconds is None else f"{seconds:>{width}.3f}"


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{'model':<14} {'strategy':<9} {'cache':<10} {'compile s':>9} {'first req s':>11} "
             f"{'TTFT first':>10} {'TTFT warm':>9}"]
    for row in result["rows"]:
        head = f"{row['model']:<14} {row['strategy']:<9} {row['cache']:<10}"
        if "refused" in row:
            lines.append(f"{head} refused: {row['refused'][:90]}")
        else:
            lines.append(f"{head} {row['compile_s']:>9.1f} {row['first_request_s']:>11.1f} "
                         f"{_cell(row['ttft_first_s'], 10)} {_cell(row['ttft_warm_s'], 9)}")
    return "\n".join(lines)

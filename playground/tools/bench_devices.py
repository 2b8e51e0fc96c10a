"""`bench --suite devices`: the three compilers and int8 weights on this process's device, greedy.

Rows, each a request through the runner as a column runs it (RunSpec's defaults otherwise): PyTorch eager with
the dynamic cache, eager with the static cache, `torch.compile` over the static cache, the JAX decoder at fp32
and at int8. Each row runs once cold (its compile, reported apart as the result reports it), then ROUNDS times
warm; tokens/s and TTFT are medians of the warm runs. A row also says what share of this device's measured
read bandwidth its decode rate uses (the roofline: bandwidth / bytes of weights read per token). A row the
device cannot run (torch.compile without a C++ compiler on a CPU, say) carries the refusal instead.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from playground import device
from playground.errors import PlaygroundError
from playground.models.catalog import BUNDLED
from playground.runner import run_to_result
from playground.spec import RunSpec

PROMPT = "Write a short story about a dragon who loves tea."
ROUNDS = 3
# name -> RunSpec values beside the model and the token count
ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("eager-dynamic", {"backend": "torch", "cache": "dynamic"}),
    ("eager-static", {"backend": "torch", "cache": "static"}),
    ("torch-compile-static", {"backend": "torch", "cache": "static", "torch_compile": "default"}),
    ("jax", {"backend": "jax", "cache": "static"}),
    ("jax-int8", {"backend": "jax", "cache": "static", "weights": "int8"}),
)
# On a GPU, torch.compile's CUDA graphs replay a whole step as one launch: the mode made for decoding there
GPU_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("torch-compile-cudagraphs", {"backend": "torch", "cache": "static", "torch_compile": "reduce-overhead"}),
)


def read_bandwidth_gbs(repeats: int = 5) -> float:
    """Read bandwidth of the device in GB/s: the best of jitted sums over an array far beyond its caches (1 GiB
    on a CPU, 4 GiB on a GPU, whose sum takes about a millisecond)."""
    import jax
    import jax.numpy as jnp

    size = (4 if device.current().kind == "cuda" else 1) << 30
    data = jnp.ones((size // 4,), jnp.float32)
    total = jax.jit(jnp.sum)
    total(data).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        total(data).block_until_ready()
        best = min(best, time.perf_counter() - start)
    del data
    return size / best / 1e9


def _row(name: str, values: dict[str, Any], bandwidth_gbs: float, rounds: int) -> dict[str, Any]:
    spec = RunSpec.from_dict(values)
    try:
        cold = run_to_result(PROMPT, spec)
        warm = [run_to_result(PROMPT, spec) for _ in range(rounds)]
    except PlaygroundError as exc:
        return {"name": name, "refused": str(exc)}
    rates = [r["metrics"]["tokens_per_s"] or 0.0 for r in warm]
    rate = statistics.median(rates)
    read = cold["extra"].get("device_weight_bytes") or cold["metrics"]["weight_bytes"]
    return {"name": name, "tokens_per_s": round(rate, 2), "tokens_per_s_runs": [round(v, 2) for v in rates],
            "ttft_s": round(statistics.median(r["metrics"]["ttft_s"] or 0.0 for r in warm), 4),
            "compile_s": round(cold["metrics"]["compile_s"], 2), "weight_bytes": int(read),
            "roofline_share": round(rate * read / (bandwidth_gbs * 1e9), 4), "device": cold.get("device"),
            "same_tokens_warm": all(r["token_ids"] == cold["token_ids"] for r in warm)}


def run_devices_suite(progress: Callable[[str], Any], models: tuple[str, ...] | None = None,
                      new_tokens: int = 128, rounds: int = ROUNDS) -> dict[str, Any]:
    """Every row on every installed bundled model (or the named ones), on this process's device."""
    found = device.current()
    progress(f"device: {found.label}; measuring read bandwidth")
    bandwidth = read_bandwidth_gbs()
    names = models or tuple(name for name, bundled in BUNDLED.items() if bundled.installed)
    results = []
    for model in names:
        rows = []
        for name, values in ROWS + (GPU_ROWS if found.kind == "cuda" else ()):
            progress(f"{model}: {name}, a cold run then {rounds} warm, {new_tokens} tokens")
            rows.append(_row(name, {"model": model, "max_new_tokens": new_tokens, "min_new_tokens": new_tokens,
                                    **values}, bandwidth, rounds))
        results.append({"model": model, "rows": rows})
    return {"device": found.label, "kind": found.kind, "bandwidth_gbs": round(bandwidth, 1),
            "new_tokens": new_tokens, "models": results}


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{result['device']}: read bandwidth {result['bandwidth_gbs']:.1f} GB/s, {result['new_tokens']} tokens, "
             "greedy",
             f"{'model':<14} {'engine':<21} {'tok/s':>8} {'TTFT s':>8} {'compile s':>9} {'% roofline':>10}"]
    for model in result["models"]:
        for row in model["rows"]:
            head = f"{model['model']:<14} {row['name']:<21}"
            if "refused" in row:
                lines.append(f"{head} refused: {row['refused'][:100]}")
            else:
                lines.append(f"{head} {row['tokens_per_s']:>8.1f} {row['ttft_s']:>8.4f} {row['compile_s']:>9.1f} "
                             f"{100 * row['roofline_share']:>9.1f}%")
    return "\n".join(lines)

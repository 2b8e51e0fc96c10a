"""Benchmark of long runs over every KV cache on both backends: `python -m playground bench --suite caches`.

Each cache decodes the same prompt for the same number of tokens (min_new_tokens pins the length) on the
PyTorch path and on the JAX path, as a request through either backend runs it (probes and token records
included on both). Every configuration runs once to warm up (the JAX path compiles then; PyTorch warms up
on a short run), then `rounds` rounds (default ROUNDS) run every configuration once each, in turn, so that a
drift of the shared machine's speed touches all of them alike; rates are medians. The machine's load average
is recorded at the start and the end (other processes share the cores). What it reports per cache: tokens/s
(after the first token), TTFT, compile time, the final KV bytes, and the JAX / PyTorch ratio.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from typing import Any

from playground import registry
from playground.errors import PlaygroundError
from playground.metrics import BandwidthProbe, rates
from playground.models.loaded import LOADED, LoadedModel
from playground.runner import backend_for, encode_prompt
from playground.spec import RunSpec
from playground.tools.bench import BENCH_PROMPT, ROUNDS

# The knobs each cache runs with (the page's defaults).
CACHE_KNOBS: dict[str, dict[str, Any]] = {
    "static": {}, "dynamic": {}, "sliding": {"window": 256}, "sink": {"window": 256, "sink_tokens": 4},
    "quantized": {"cache_bits": 4, "residual_length": 128},
}
CACHES: tuple[str, ...] = ()  # the caches timed; empty: every registered cache
BACKENDS = ("torch", "jax")
TORCH_WARM_UP_TOKENS = 16  # PyTorch compiles nothing: a short run warms its allocator and kernels


class _Config:
    """One cache on one backend: its spec, and what its runs measured."""

    def __init__(self, loaded: LoadedModel, cache: str, backend: str, new_tokens: int) -> None:
        self.loaded, self.backend = loaded, backend
        self.spec = RunSpec(model=loaded.name, backend=backend, cache=cache, max_new_tokens=new_tokens,
                            min_new_tokens=new_tokens, **CACHE_KNOBS.get(cache, {}))
        self.row: dict[str, Any] = {"name": f"{backend}-{cache}", "backend": backend, "cache": cache,
                                    "knobs": CACHE_KNOBS.get(cache, {})}
        self.runs: list[float] = []
        self.ttfts: list[float] = []

    def run(self, ids: Any, spec: RunSpec | None = None, should_stop: Callable[[], bool] = lambda: False) -> Any:
        out = backend_for(self.backend).generate(self.loaded, ids, spec or self.spec, lambda _: None, should_stop)
        if spec is None:
            rate, ttft = rates(out.start_time, out.token_times)
            self.runs.append(rate or 0.0)
            self.ttfts.append(ttft or 0.0)
            self.row["kv_cache_bytes"] = out.kv_cache_bytes
        return out

    def warm_up(self, ids: Any) -> None:
        """The JAX path compiles every program of the request before its prompt runs (its compile_s is reported),
        so a run stopped after its first token warms it up."""
        if self.backend == "jax":
            out = self.run(ids, self.spec, should_stop=lambda: True)
            self.row["compile_s"] = round(out.compile_s, 3)
        else:
            short = self.spec.replace(max_new_tokens=TORCH_WARM_UP_TOKENS, min_new_tokens=TORCH_WARM_UP_TOKENS)
            self.run(ids, short)
            self.row["compile_s"] = 0.0

    def result(self) -> dict[str, Any]:
        return {**self.row, "tokens_per_s": round(statistics.median(self.runs), 3),
                "tokens_per_s_runs": [round(r, 3) for r in self.runs],
                "ttft_s": round(statistics.median(self.ttfts), 4)}


def _configs(loaded: LoadedModel, ids: Any, new_tokens: int,
             progress: Callable[[str], Any]) -> tuple[list[_Config], list[dict[str, Any]]]:
    """Every cache x backend that can run on this model, warmed up; and the refused ones with the reason."""
    runnable, refused = [], []
    for cache in CACHES or registry.cache_names():
        for backend in BACKENDS:
            config = _Config(loaded, cache, backend, new_tokens)
            progress(f"{config.row['name']}: warm-up")
            try:
                config.warm_up(ids)
            except PlaygroundError as exc:
                refused.append({**config.row, "refused": str(exc)})
                continue
            runnable.append(config)
    return runnable, refused


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_name = {r["name"]: r for r in rows}

    def get(name: str, key: str) -> float | None:
        return by_name.get(name, {}).get(key)

    return {
        "jax_vs_torch": {c: _ratio(get(f"jax-{c}", "tokens_per_s"), get(f"torch-{c}", "tokens_per_s"))
                         for c in CACHES or registry.cache_names()},
        "jax_sliding_vs_jax_static": _ratio(get("jax-sliding", "tokens_per_s"), get("jax-static", "tokens_per_s")),
        "quantized_bytes_vs_static": {b: _ratio(get(f"{b}-quantized", "kv_cache_bytes"),
                                                get(f"{b}-static", "kv_cache_bytes")) for b in BACKENDS},
    }


def run_cache_suite(model: str = "smollm2-135m", max_new_tokens: int = 1024,
                    progress: Callable[[str], Any] = print, rounds: int | None = None) -> dict[str, Any]:
    """Every cache on both backends in this process; returns the suite's JSON object."""
    from playground.backends.jax.engine import disk_cache

    disk_cache.enable()
    start_load = os.getloadavg()
    progress(f"loading {model}")
    loaded, _ = LOADED.get(model, "fp32")
    ids = encode_prompt(loaded, BENCH_PROMPT, None)
    configs, refused = _configs(loaded, ids, max_new_tokens, progress)
    rounds = rounds or ROUNDS
    probe = BandwidthProbe()
    try:
        for round_index in range(rounds):
            probe.sample()
            for config in configs:
                progress(f"round {round_index + 1}/{rounds}: {config.row['name']}, {max_new_tokens} tokens")
                config.run(ids)
    finally:
        probe.close()
    rows = [c.result() for c in configs]
    return {"suite": "caches", "model": model, "prompt_tokens": len(ids), "new_tokens": max_new_tokens,
            "rounds": rounds, "load_average": [start_load, os.getloadavg()],
            "bandwidth_gbs": round(statistics.median(probe.samples), 2), "weight_bytes": loaded.weight_bytes,
            "configs": rows + refused, "ratios": _ratios(rows)}


def format_table(result: dict[str, Any]) -> str:
    """The suite as a table per cache (both backends side by side) and the ratios the targets are about."""

    def cell(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    by_name = {r["name"]: r for r in result["configs"]}
    lines = [f"model {result['model']}, prompt {result['prompt_tokens']} + {result['new_tokens']} new tokens, "
             f"read bandwidth {result['bandwidth_gbs']:.1f} GB/s (median), {result['rounds']} round(s), load "
             f"average {result['load_average'][0][0]:.1f} at the start, {result['load_average'][1][0]:.1f} at the end",
             "",
             f"{'cache':<11}{'torch tok/s':>12}{'jax tok/s':>11}{'jax/torch':>11}{'torch KV MB':>13}"
             f"{'jax KV MB':>11}{'jax compile s':>15}"]
    for cache in CACHES or registry.cache_names():
        torch_row, jax_row = by_name.get(f"torch-{cache}", {}), by_name.get(f"jax-{cache}", {})
        if "refused" in jax_row or "refused" in torch_row:
            lines.append(f"{cache:<11}refused: {(jax_row or torch_row).get('refused')}")
            continue
        kv = [r.get("kv_cache_bytes") for r in (torch_row, jax_row)]
        lines.append(f"{cache:<11}{cell(torch_row.get('tokens_per_s'), '12.1f')}"
                     f"{cell(jax_row.get('tokens_per_s'), '11.1f')}"
                     f"{cell(result['ratios']['jax_vs_torch'][cache], '10.2f')}x"
                     f"{cell(kv[0] and kv[0] / 1e6, '13.1f')}{cell(kv[1] and kv[1] / 1e6, '11.1f')}"
                     f"{cell(jax_row.get('compile_s'), '15.1f')}")
    ratios = result["ratios"]
    lines += ["", f"jax sliding / jax static: {cell(ratios['jax_sliding_vs_jax_static'], '.2f')}x   "
                  f"quantized / static KV bytes: jax {cell(ratios['quantized_bytes_vs_static']['jax'], '.0%')}, "
                  f"torch {cell(ratios['quantized_bytes_vs_static']['torch'], '.0%')}"]
    return "\n".join(lines)

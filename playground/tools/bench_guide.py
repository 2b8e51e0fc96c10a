"""The generation guide's other methods in the benchmark: beam sampling, diverse beam search, contrastive search and
DoLa, each on both backends, and JAX greedy beside them for contrastive search's own target.

Every row is timed over whole runs (prefill included, compile_s taken out), as beam search's rows are: the beam
methods stream nothing until they end, so whole runs are the one rate every row shares. min_new_tokens pins the
length. Each row runs once cold (the JAX row's compile_s is reported), then `rounds` times, each after a bandwidth
sample; rates are medians. Targets, as ratios within one run: JAX >= 1.0x PyTorch for each method
(`jax_<method>_vs_torch_<method>`), and contrastive search on JAX at most 2x JAX greedy's time per token
(`jax_contrastive_time_per_token_vs_jax_greedy`).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Protocol

from playground.models.loaded import LoadedModel
from playground.runner import backend_for
from playground.spec import RunSpec

# method -> its knobs (the guide's examples: 4 beams, 2 groups, diversity 1.0, alpha 0.6 / k 4, DoLa high + 1.2)
METHODS: dict[str, dict[str, Any]] = {
    "beam_sample": {"num_beams": 4, "temperature": 1.0},
    "diverse_beam": {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1.0},
    "contrastive": {"penalty_alpha": 0.6, "top_k": 4},
    "dola": {"dola_layers": "high", "repetition_penalty": 1.2},
}


class Probe(Protocol):
    def sample(self) -> float: ...


def _row(loaded: LoadedModel, ids: list[int], new_tokens: int, backend: str, strategy: str,
         knobs: dict[str, Any], probe: Probe, rounds: int) -> dict[str, Any]:
    """`{backend}-{strategy}`: whole-run tokens/s (median of `rounds`) and the cold call's compile_s."""
    generate = backend_for(backend).generate
    spec = RunSpec.from_dict({"model": loaded.name, "backend": backend, "strategy": strategy, "cache": "dynamic",
                              "max_new_tokens": new_tokens, "min_new_tokens": new_tokens, **knobs})

    def run_once() -> tuple[float, float]:
        start = time.perf_counter()
        out = generate(loaded, ids, spec, lambda _: None, lambda: False)
        return len(out.sequences[0]) / (time.perf_counter() - start - out.compile_s), out.compile_s

    _, compile_s = run_once()
    speeds = []
    for _ in range(rounds):
        probe.sample()
        speeds.append(run_once()[0])
    return {"name": f"{backend}-{strategy}", "tokens_per_s": statistics.median(speeds), "ttft_s": None,
            "compile_s": round(compile_s, 3) if backend == "jax" else 0.0}


def bench_guide(loaded: LoadedModel, ids: list[int], new_tokens: int, probe: Probe, rounds: int,
                progress: Any) -> list[dict[str, Any]]:
    """Every method on both backends, then JAX greedy over whole runs (`jax-greedy-whole-run`)."""
    rows = []
    for strategy, knobs in METHODS.items():
        for backend in ("torch", "jax"):
            progress(f"{backend}-{strategy}: {new_tokens} tokens, warm-up + {rounds} timed (whole runs)")
            rows.append(_row(loaded, ids, new_tokens, backend, strategy, knobs, probe, rounds))
    progress(f"jax-greedy over whole runs: {new_tokens} tokens, warm-up + {rounds} timed")
    greedy = _row(loaded, ids, new_tokens, "jax", "greedy", {}, probe, rounds)
    rows.append({**greedy, "name": "jax-greedy-whole-run"})
    return rows


def guide_ratios(by_name: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """jax_<method>_vs_torch_<method> per method, and contrastive search's time per token over JAX greedy's."""
    def rate(name: str) -> float | None:
        return by_name.get(name, {}).get("tokens_per_s")

    ratios: dict[str, float | None] = {}
    for strategy in METHODS:
        mine, theirs = rate(f"jax-{strategy}"), rate(f"torch-{strategy}")
        ratios[f"jax_{strategy}_vs_torch_{strategy}"] = round(mine / theirs, 3) if mine and theirs else None
    contrastive, greedy = rate("jax-contrastive"), rate("jax-greedy-whole-run")
    ratios["jax_contrastive_time_per_token_vs_jax_greedy"] = (round(greedy / contrastive, 3)
                                                              if contrastive and greedy else None)
    return ratios


def guide_lines(result: dict[str, Any]) -> list[str]:
    """The table's closing lines for these rows."""
    ratios = result["ratios"]
    if "jax_dola_vs_torch_dola" not in ratios:
        return []
    pairs = ", ".join(f"{strategy} {ratios[f'jax_{strategy}_vs_torch_{strategy}']}x" for strategy in METHODS)
    return [f"the guide's methods, jax / torch (whole runs): {pairs}",
            "jax contrastive time per token / jax greedy's: "
            f"{ratios['jax_contrastive_time_per_token_vs_jax_greedy']}x (target <= 2)"]

"""In-process benchmark: memory-bandwidth roofline, generate (dynamic and static cache) and the JAX decoder,
beam search with 4 beams on both backends (bench_beam.py), and the generation guide's other methods on both
backends (bench_guide.py).

Decoding one token reads every weight once, so the ceiling on this machine is measured read bandwidth
divided by the model's weight bytes. Each configuration decodes the same prompt for the same number of
tokens (min_new_tokens pins the length, so an early EOS cannot flatter anyone); tokens_per_s is the decode
rate after the first token, (n - 1) / (t_last - t_first), and ttft_s the time to the first token. Every
configuration runs once to warm up (the JAX decoder's cold run reports its compile_s), then ROUNDS times
timed, each preceded by a bandwidth sample; rates, TTFTs and the bandwidth are medians. Figures still drift
between runs on shared machines; compare the ratios within one run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from playground.backends.torch.reference import reference_greedy
from playground.backends.torch.timing import TimingStreamer
from playground.compatibility import weights_refusal
from playground.metrics import BandwidthProbe, rates
from playground.models.loaded import LOADED, LoadedModel
from playground.runner import encode_prompt
from playground.tools.bench_assisted import assisted_lines, bench_grounded, grounded_ratios
from playground.tools.bench_beam import BEAMS, bench_beam
from playground.tools.bench_guide import bench_guide, guide_lines, guide_ratios
from playground.tools.bench_weights import fp32_references, kl_from_fp32

BENCH_PROMPT = "Write a short story about a dragon who loves tea."
ROUNDS = 3  # timed runs per configuration; the median is reported


def _timed(name: str, run_once: Callable[[], tuple[float, list[float]]], probe: BandwidthProbe,
           compile_s: float = 0.0, **figures: Any) -> dict[str, Any]:
    """Median tokens/s and TTFT over ROUNDS runs, the bandwidth sampled before each (warm-up done by the caller);
    `figures` are added to the row as they are."""
    speeds, ttfts = [], []
    for _ in range(ROUNDS):
        probe.sample()
        rate, ttft = rates(*run_once())
        speeds.append(rate or 0.0)
        ttfts.append(ttft or 0.0)
    return {"name": name, "tokens_per_s": statistics.median(speeds), "ttft_s": statistics.median(ttfts),
            "compile_s": compile_s, **figures}


def bench_torch(loaded: LoadedModel, ids: list[int], new_tokens: int, cache: str,
                probe: BandwidthProbe) -> dict[str, Any]:
    """model.generate, greedy: one warm-up call, then ROUNDS timed calls."""
    prompt = torch.tensor([ids])  # (1, T)

    def run_once() -> tuple[float, list[float]]:
        clock = TimingStreamer(lambda ids: None)
        start = time.perf_counter()
        reference_greedy(loaded.model, prompt, new_tokens, cache, streamer=clock)
        return start, clock.token_times

    run_once()
    return _timed(f"torch-{cache}", run_once, probe)


# Sampling with only top-k and top-p, and with every stage of the logits chain on (docs/samplers.md): the row
# pair that shows what the chain's stages cost inside the jitted step, timed in interleaved rounds
PAIR_ROUNDS = 5
SAMPLING: dict[str, Any] = {"strategy": "sampling", "temperature": 0.9, "top_k": 50, "top_p": 0.9, "seed": 1}
ALL_SAMPLERS: dict[str, Any] = {
    **SAMPLING, "min_p": 0.02, "typical_p": 0.95, "epsilon_cutoff": 0.0003, "eta_cutoff": 0.0005, "top_n_sigma": 2.0,
    "xtc_threshold": 0.1, "xtc_probability": 0.5, "repetition_penalty": 1.1, "presence_penalty": 0.2,
    "frequency_penalty": 0.2, "no_repeat_ngram_size": 4, "dry_multiplier": 0.8}


def _jax_run(loaded: LoadedModel, ids: list[int], new_tokens: int, weights: str = "fp32",
             **knobs: Any) -> tuple[Callable[[], tuple[float, list[float]]], Any]:
    """A JAX request of these settings: one timed run as a callable, and the cold call's output (it compiles, or
    loads from the persistent cache: its compile_s is what we report)."""
    from playground.backends.jax import decoder
    from playground.spec import RunSpec

    spec = RunSpec.from_dict({"model": loaded.name, "backend": "jax", "cache": "static",
                              "max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "weights": weights,
                              **knobs})

    def run_once() -> tuple[float, list[float]]:
        out = decoder.generate(loaded, ids, spec, lambda _: None, lambda: False)
        return out.start_time, out.token_times

    return run_once, decoder.generate(loaded, ids, spec, lambda _: None, lambda: False)


def bench_jax(loaded: LoadedModel, ids: list[int], new_tokens: int, probe: BandwidthProbe,
              weights: str = "fp32") -> dict[str, Any]:
    """The JAX decoder: a cold call, then ROUNDS warm calls. With int8 or q4 weights the row also says how many bytes a
    step reads and what the precision costs (KL from the fp32 model)."""
    run_once, cold = _jax_run(loaded, ids, new_tokens, weights)
    if weights == "fp32":
        return _timed("jax", run_once, probe, compile_s=round(cold.compile_s, 3))
    kl = kl_from_fp32(loaded.name, "jax", weights, fp32_references(loaded.name))
    return _timed(f"jax-{weights}", run_once, probe, compile_s=round(cold.compile_s, 3),
                  weight_bytes=cold.extra["device_weight_bytes"], kl_vs_fp32=float(f"{kl:.4g}"))


def bench_jax_pair(loaded: LoadedModel, ids: list[int], new_tokens: int, probe: BandwidthProbe,
                   configs: tuple[tuple[str, dict[str, Any]], ...], rounds: int = PAIR_ROUNDS) -> list[dict[str, Any]]:
    """Configurations whose ratio is the figure (sampling with and without the chain's other stages): compiled
    first, then timed in interleaved rounds, so that the machine's drift (tens of percent here between minutes)
    falls on each alike; each row is the median of its rounds."""
    runs = [(name, *_jax_run(loaded, ids, new_tokens, **knobs)) for name, knobs in configs]
    speeds: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    ttfts: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    for _ in range(rounds):
        for name, run_once, _ in runs:
            probe.sample()
            rate, ttft = rates(*run_once())
            speeds[name].append(rate or 0.0)
            ttfts[name].append(ttft or 0.0)
    return [{"name": name, "tokens_per_s": statistics.median(speeds[name]), "ttft_s": statistics.median(ttfts[name]),
             "compile_s": round(cold.compile_s, 3), "tokens_per_s_runs": [round(v, 2) for v in speeds[name]]}
            for name, _, cold in runs]


def run_bench(model: str = "smollm2-135m", max_new_tokens: int = 128,
              progress: Callable[[str], Any] = print, guide: bool = True) -> dict[str, Any]:
    """Run every configuration in this process and return the bench JSON object (see docs/benchmarks.md);
    `guide=False` leaves out the guide's other methods (bench_guide.py)."""
    from playground.backends.jax.engine import disk_cache

    disk_cache.enable()
    progress(f"loading {model}")
    loaded, _ = LOADED.get(model, "fp32")
    ids = encode_prompt(loaded, BENCH_PROMPT, None)  # chat template on an instruct model, as a run applies it
    progress("measuring memory bandwidth (jitted sums over 1 GiB, sampled before every timed run)")
    probe = BandwidthProbe()
    configs = []
    try:
        for cache in ("dynamic", "static"):
            progress(f"torch-{cache}: generate, {max_new_tokens} tokens, warm-up + {ROUNDS} timed")
            configs.append(bench_torch(loaded, ids, max_new_tokens, cache, probe))
        progress(f"jax: compile, then {max_new_tokens} tokens warm, {ROUNDS} timed")
        configs.append(bench_jax(loaded, ids, max_new_tokens, probe))
        for weights in (w for w in ("int8", "q4") if weights_refusal("jax", w) is None):  # a GPU's: int8 only
            progress(f"jax-{weights}: {weights} weights, compile, then {max_new_tokens} tokens warm, {ROUNDS} timed")
            configs.append(bench_jax(loaded, ids, max_new_tokens, probe, weights=weights))
        progress(f"jax-sampling and jax-all-samplers: top-k and top-p alone, then every stage of the logits chain; "
                 f"compile, then {max_new_tokens} tokens warm, {PAIR_ROUNDS} interleaved rounds")
        configs += bench_jax_pair(loaded, ids, max_new_tokens, probe,
                                  (("jax-sampling", SAMPLING), ("jax-all-samplers", ALL_SAMPLERS)))
        configs += bench_grounded(loaded, max_new_tokens, probe, progress, _timed)
        for backend in ("torch", "jax"):
            progress(f"{backend}-beam{BEAMS}: {BEAMS} beams, {max_new_tokens} tokens, warm-up + {ROUNDS} timed")
            configs.append(bench_beam(loaded, ids, max_new_tokens, backend, probe, ROUNDS))
        configs += bench_guide(loaded, ids, max_new_tokens, probe, ROUNDS, progress) if guide else []
    finally:
        probe.close()
    bandwidth = statistics.median(probe.samples)
    weight_bytes = loaded.weight_bytes
    roofline = bandwidth * 1e9 / weight_bytes
    by_name = {c["name"]: c for c in configs}
    jax_rate = by_name["jax"]["tokens_per_s"] or 0.0
    dynamic_rate = by_name["torch-dynamic"]["tokens_per_s"] or 0.0
    return {
        "model": model,
        "new_tokens": max_new_tokens,
        "bandwidth_gbs": round(bandwidth, 2),
        "weight_bytes": weight_bytes,
        "roofline_tokens_per_s": round(roofline, 2),
        "configs": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in c.items()} for c in configs],
        "ratios": {
            "jax_vs_torch_dynamic": round(jax_rate / dynamic_rate, 3) if dynamic_rate else None,
            "jax_vs_roofline": round(jax_rate / roofline, 3) if roofline else None,
            "jax_int8_vs_jax": _ratio(by_name, "jax-int8", "jax"),
            "jax_int8_vs_torch_dynamic": _ratio(by_name, "jax-int8", "torch-dynamic"),
            "jax_q4_vs_jax": _ratio(by_name, "jax-q4", "jax") if "jax-q4" in by_name else None,
            "jax_q4_vs_jax_int8": _ratio(by_name, "jax-q4", "jax-int8") if "jax-q4" in by_name else None,
            "jax_all_samplers_vs_jax_sampling": _ratio(by_name, "jax-all-samplers", "jax-sampling"),
            **grounded_ratios(by_name),
            "jax_beam4_vs_torch_beam4": _ratio(by_name, f"jax-beam{BEAMS}", f"torch-beam{BEAMS}"),
            **guide_ratios(by_name),
        },
    }


def _ratio(by_name: dict[str, dict[str, Any]], numerator: str, denominator: str) -> float | None:
    top, bottom = by_name[numerator]["tokens_per_s"], by_name[denominator]["tokens_per_s"]
    return round(top / bottom, 3) if top and bottom else None


def format_table(result: dict[str, Any]) -> str:
    """The bench result as a human table plus the two ratios."""

    def cell(value: Any, fmt: str) -> str:
        """The value in `fmt`, or a dash right-aligned to the same width (the format's leading digits)."""
        if value is not None:
            return format(value, fmt)
        width = fmt.split(".")[0]
        return format("-", f">{width}") if width.isdigit() else "-"

    lines = [
        f"model {result['model']}, {result['new_tokens']} new tokens, weights {result['weight_bytes'] / 1e6:.0f} MB",
        f"read bandwidth {result['bandwidth_gbs']:.1f} GB/s (median) -> roofline "
        f"{result['roofline_tokens_per_s']:.1f} tok/s",
        "",
        f"{'config':<20}{'tok/s':>9}{'ttft s':>9}{'compile s':>11}{'% roofline':>12}",
    ]
    for row in result["configs"]:
        share = (row["tokens_per_s"] / result["roofline_tokens_per_s"] * 100
                 if row["tokens_per_s"] and result["roofline_tokens_per_s"] else None)
        lines.append(f"{row['name']:<20}{cell(row['tokens_per_s'], '9.1f')}{cell(row['ttft_s'], '9.3f')}"
                     f"{cell(row['compile_s'], '11.2f')}{cell(share, '11.0f')}%")
    ratios = result["ratios"]
    lines += ["", f"jax / torch-dynamic: {cell(ratios['jax_vs_torch_dynamic'], '.2f')}x   "
                  f"jax / roofline: {cell(ratios['jax_vs_roofline'], '.0%')}"]
    if ratios.get("jax_int8_vs_jax") is not None:
        lines.append(f"jax-int8 / jax: {cell(ratios['jax_int8_vs_jax'], '.2f')}x   jax-int8 / torch-dynamic: "
                     f"{cell(ratios['jax_int8_vs_torch_dynamic'], '.2f')}x (% roofline: of the fp32 weights' bytes)")
    if ratios.get("jax_q4_vs_jax") is not None:
        lines.append(f"jax-q4 / jax: {cell(ratios['jax_q4_vs_jax'], '.2f')}x   jax-q4 / jax-int8: "
                     f"{cell(ratios['jax_q4_vs_jax_int8'], '.2f')}x")
    lines += assisted_lines(result)
    if ratios.get("jax_all_samplers_vs_jax_sampling") is not None:
        lines.append(f"jax-all-samplers / jax-sampling: {cell(ratios['jax_all_samplers_vs_jax_sampling'], '.2f')}x "
                     "(every stage of the logits chain on, against top-k and top-p alone)")
    if "jax_beam4_vs_torch_beam4" in ratios:
        lines.append(f"jax-beam4 / torch-beam4: {cell(ratios['jax_beam4_vs_torch_beam4'], '.2f')}x "
                     "(beam: whole-run rates, prefill included)")
    lines += guide_lines(result)
    return "\n".join(lines)

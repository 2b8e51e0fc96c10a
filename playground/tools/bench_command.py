"""`python -m playground bench`: its options and which suite runs (each suite's module imports torch and jax, so
they are imported only when that suite runs)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from playground.errors import PlaygroundError

SUITES = ("default", "caches", "sweeps", "compile", "weights", "devices", "grammar", "constraints", "reuse",
          "profile")


def build_parser(bench: argparse.ArgumentParser) -> argparse.ArgumentParser:
    bench.add_argument("--model", default=None,
                       help="default: smollm2-135m (suites compile and devices: every installed bundled model unless "
                            "one is named; grammar: both bundled models' tokenizers unless one is named)")
    bench.add_argument("--suite", choices=SUITES,
                       default="default",
                       help="default: generate vs the JAX decoder against the roofline; caches: every KV cache on "
                            "both backends over long runs; sweeps: the page's sweep presets, first and again; "
                            "compile: every JAX cell's first request on both bundled models (with "
                            "PLAYGROUND_COMPILE_CACHE=0 for cold compiles); weights: every weight precision on "
                            "both backends, speed and KL from fp32; devices: eager, torch.compile and JAX (fp32, int8) "
                            "on this process's device (the GPU when there is one) against its roofline; grammar: the "
                            "grammar engines (llguidance, xgrammar where installed) on the bundled tokenizers: "
                            "compile, per-step mask and rollback times; constraints: unconstrained greedy against a "
                            "regex, a JSON schema and a choice list on both backends: tokens/s, matcher compile and "
                            "mask time per token; reuse: the prefix store's TTFT cold against warm at 512, 2048 and "
                            "4096 shared tokens + 32 new on every cache and both backends, and a Step against a decode "
                            "step; profile: where a JAX decode step's time goes (weight matvecs, attention, cache "
                            "writes, token choice, the rest, host) at fp32, int8 and q4, from XLA's own thunk timings")
    bench.add_argument("--max-new-tokens", type=int, default=None,
                       help="default: 128 (suites default and profile), 1024 (suite caches), 64 (suite weights)")
    bench.add_argument("--rounds", type=int, default=None,
                       help="suites caches, weights, devices and grammar: timed rounds of every configuration "
                            "(default 3; the median is reported)")
    bench.add_argument("--json", action="store_true")
    return bench


def command_bench(args: argparse.Namespace) -> None:
    """Runs the suite `args.suite` and prints its table, or its JSON object with --json."""
    from playground.tools import bench, bench_caches  # imported here: they load torch and jax

    new_tokens = args.max_new_tokens or {"caches": 1024, "weights": 64}.get(args.suite, 128)
    if new_tokens < 2:
        raise PlaygroundError(f"--max-new-tokens={new_tokens} is too small; the benchmark needs at least 2")
    def progress(message: str) -> None:
        print(message, file=sys.stderr)

    if args.suite == "compile":
        from playground.tools import bench_compile

        result = bench_compile.run_compile_suite(progress, (args.model,) if args.model else bench_compile.MODELS)
        print(json.dumps(result) if args.json else bench_compile.format_table(result))
        return
    if args.suite == "devices":
        from playground.tools import bench_devices

        result = bench_devices.run_devices_suite(progress, (args.model,) if args.model else None, new_tokens,
                                                 rounds=args.rounds or bench_devices.ROUNDS)
        print(json.dumps(result) if args.json else bench_devices.format_table(result))
        return
    if args.suite == "grammar":
        from playground.tools import bench_grammar

        result = bench_grammar.run_grammar_suite(progress, (args.model,) if args.model else bench_grammar.TOKENIZERS,
                                                 rounds=args.rounds or bench_grammar.ROUNDS)
        print(json.dumps(result) if args.json else bench_grammar.format_table(result))
        return
    model = args.model or "smollm2-135m"
    named = _model_suite(args, model, progress)
    if named is not None:
        result, table = named
        print(json.dumps(result) if args.json else table(result))
        return
    if args.suite == "weights":
        from playground.tools import bench_weights

        result = bench_weights.run_weights_suite(model, new_tokens, progress, rounds=args.rounds or 3)
        print(json.dumps(result) if args.json else bench_weights.format_table(result))
        return
    if args.suite == "caches":
        result = bench_caches.run_cache_suite(model, new_tokens, progress=progress, rounds=args.rounds)
        print(json.dumps(result) if args.json else bench_caches.format_table(result))
        return
    result = bench.run_bench(model, new_tokens, progress=progress)
    print(json.dumps(result) if args.json else bench.format_table(result))


def _model_suite(args: argparse.Namespace, model: str,
                 progress: Callable[[str], None]) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]] | None:
    """The result and table of the suites sweeps, constraints, profile and reuse; None for the others."""
    if args.suite == "sweeps":
        from playground.tools import bench_sweeps

        return bench_sweeps.run_sweep_suite(progress), bench_sweeps.format_table
    if args.suite == "constraints":
        from playground.tools import bench_constraints

        return (bench_constraints.run_constraint_suite(model, args.max_new_tokens or 64, progress,
                                                       rounds=args.rounds or bench_constraints.ROUNDS),
                bench_constraints.format_table)
    if args.suite == "profile":
        from playground.tools import bench_profile

        return bench_profile.run_profile_suite(model, args.max_new_tokens or 128, progress), bench_profile.format_table
    if args.suite == "reuse":
        from playground.tools import bench_reuse

        return bench_reuse.run_reuse_suite(model, progress), bench_reuse.format_table
    return None

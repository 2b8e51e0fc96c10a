"""Two checkouts' decode speed, interleaved, on the bench's grounded prompt: does a change move the ratios?

Each configuration is one `run --repeats 3` per checkout and round (SmolLM2 fp32, 128 tokens pinned); the first
repeat warms, and each cell is the median of the other repeats of every round. The two checkouts run each
configuration back to back, before then after in odd rounds and after then before in even ones: a shared
machine's speed drifts by more than most changes move a row, and it drifts less between two neighbouring runs
than between two halves of a round (a first version ran each checkout's configurations as a block, and its
rows moved by up to 3% where runs taken in turn moved by under 1%).

    .venv/bin/python scripts/bench_ab.py /path/to/before /path/to/after [--rounds 4] [--only NAME ...]

Each checkout runs with its own `.venv/bin/python` (a symlink to this one's will do).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playground.tools.bench_assisted import GROUNDED_PROMPT, PROMPT_LOOKUP  # noqa: E402

BASE = ["--no-chat", "--max-new-tokens", "128", "--min-new-tokens", "128", "--repeats", "3", "--json"]
JAX_STATIC = ["--backend", "jax", "--cache", "static"]
BASELINE = "jax greedy, static"
# the bench's configurations behind its ratios (playground/tools/bench.py)
CONFIGS = {
    "torch greedy, dynamic": ["--backend", "torch", "--cache", "dynamic"],
    BASELINE: JAX_STATIC,
    "jax beam, 4 beams": [*JAX_STATIC, "--strategy", "beam", "--num-beams", "4"],
    f"jax prompt lookup, {PROMPT_LOOKUP} drafts": [*JAX_STATIC, "--strategy", "assisted", "--prompt-lookup",
                                                   str(PROMPT_LOOKUP)],
    "jax contrastive (0.6, k 4)": [*JAX_STATIC, "--strategy", "contrastive", "--penalty-alpha", "0.6", "--top-k", "4"],
    "jax DoLa (high, penalty 1.2)": [*JAX_STATIC, "--strategy", "dola", "--dola-layers", "high",
                                     "--repetition-penalty", "1.2"],
}


def timed_runs(checkout: Path, args: list[str], prompt_file: str) -> list[float]:
    """tokens/s of each repeat after the first."""
    done = subprocess.run([str(checkout / ".venv/bin/python"), "-m", "playground", "run", *BASE, *args,
                           "--prompt-file", prompt_file], cwd=checkout, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["metrics"]["tokens_per_s_runs"][1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--only", nargs="+", choices=list(CONFIGS), metavar="NAME",
                        help=f"these configurations (and {BASELINE!r}, the ratios' base); default: all")
    options = parser.parse_args()
    checkouts = {"before": options.before.resolve(), "after": options.after.resolve()}
    names = [n for n in CONFIGS if not options.only or n in options.only or n == BASELINE]
    speeds: dict[str, dict[str, list[float]]] = {name: {"before": [], "after": []} for name in names}
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as prompt:
        prompt.write(GROUNDED_PROMPT)
        prompt.flush()
        for round_ in range(options.rounds):
            order = ("before", "after") if round_ % 2 == 0 else ("after", "before")
            for name in names:
                for side in order:
                    runs = timed_runs(checkouts[side], CONFIGS[name], prompt.name)
                    speeds[name][side] += runs
                    print(f"round {round_ + 1} {side} {name}: {runs} tok/s (load {os.getloadavg()[0]:.2f})",
                          file=sys.stderr)
    median = {name: {side: statistics.median(v) for side, v in sides.items()} for name, sides in speeds.items()}
    print("| configuration | before tok/s | after tok/s | change |\n| --- | ---: | ---: | ---: |")
    for name, m in median.items():
        print(f"| {name} | {m['before']:.2f} | {m['after']:.2f} | {100 * (m['after'] / m['before'] - 1):+.1f}% |")
    print("\n| ratio | before | after | change |\n| --- | ---: | ---: | ---: |")
    for name, m in median.items():
        if name == BASELINE:
            continue
        on_torch = name.startswith("torch")  # JAX over PyTorch, as bench's jax_vs_torch ratio; the rest over JAX
        num, den = (median[BASELINE], m) if on_torch else (m, median[BASELINE])
        label = f"JAX greedy / {name}" if on_torch else f"{name} / JAX greedy"
        before, after = num["before"] / den["before"], num["after"] / den["after"]
        print(f"| {label} | {before:.3f} | {after:.3f} | {100 * (after / before - 1):+.1f}% |")


if __name__ == "__main__":
    main()

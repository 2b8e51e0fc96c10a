"""Where a JAX decode step's time goes: `python -m playground bench --suite profile`.

A decode step should cost the read of its weights and little else (docs/benchmarks.md compares it with the
memory roofline). This suite runs a greedy JAX decode per weight precision under JAX's profiler, reads the time
of every thunk XLA's CPU runtime executed in the decode program, and sorts each into what it does, by the
optimized HLO that XLA dumps for that program:

- weight matvecs: a dot (or a fusion around one, int8's and q4's unpacking) of the activations with a weight;
- attention over the cache: a batched dot (per KV head) and the attention's own loop;
- cache writes: the update of a layer's keys and values;
- token choice and records: the vocabulary-wide work after the head (argmax or the sampler, the top five and each
  token's p and p_model, which the page shows);
- norms, rope, activations and the rest: every other fused elementwise kernel;
- host and dispatch: the decode's wall time less its thunks' (the Python loop, a device_get per chunk of steps).

Each precision runs in its own Python, because XLA's dump flags must be set before JAX starts.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from playground.device import cpu_name

PRECISIONS = ("fp32", "int8", "q4")
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
CATEGORIES = ("weight matvecs", "attention over the cache", "cache writes", "token choice and records",
              "norms, rope, activations and the rest", "host and dispatch")
CONTAINERS = ("while", "conditional", "call")  # their thunks time their bodies' thunks again
DECODE_MODULE = "jit_call"  # the kernel's chunked decode program (engine/kernel.py)
INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (\S+(?: \S+)*?) ([\w\-]+)\((.*)$")
COMPUTATION = re.compile(r"^%?([\w.\-]+) .*\{\s*$")


def run_profile_suite(model: str, new_tokens: int, progress: Any,
                      precisions: tuple[str, ...] = PRECISIONS) -> dict[str, Any]:
    """One row per precision, each profiled in a fresh Python."""
    rows = []
    for weights in precisions:
        progress(f"profiling a {new_tokens}-token JAX decode at {weights}")
        with tempfile.TemporaryDirectory(prefix="playground-profile-") as folder:
            env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={folder}/hlo "
                                              "--xla_dump_hlo_as_text --xla_dump_hlo_module_re=jit_call"}
            done = subprocess.run([sys.executable, "-m", "playground.tools.bench_profile", "--model", model,
                                   "--weights", weights, "--max-new-tokens", str(new_tokens), "--folder", folder],
                                  env=env, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"profiling {weights} failed: {done.stderr.strip().splitlines()[-1:]}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {"model": model, "new_tokens": new_tokens, "rows": rows, "cpu": cpu_name(), "load": os.getloadavg()[0]}


def profile_one(model: str, weights: str, new_tokens: int, folder: Path) -> dict[str, Any]:
    """A warm-up run (compiles), then the same run traced; its decode program's thunks by category."""
    import jax

    from playground.spec import RunSpec

    spec = RunSpec(model=model, backend="jax", chat=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                   cache="static", weights=weights, reuse=False)
    _result(spec)
    trace = folder / "trace"
    with jax.profiler.trace(str(trace), create_perfetto_trace=True):
        started = time.perf_counter()
        result = _result(spec)
        wall = time.perf_counter() - started
    events = _events(next(trace.glob("**/*.trace.json.gz")))
    hlo = _instructions(sorted((folder / "hlo").glob(f"*{DECODE_MODULE}.after_optimizations.txt"))[-1])
    decode_s = _span(events, "_decode") or wall
    tokens = int(result["new_tokens"]) - 1  # the first token comes from the prefill
    per_token: dict[str, float] = collections.defaultdict(float)
    for name, micros in _thunks(events).items():
        category = _category(hlo.get(name))
        if category is not None:
            per_token[category] += micros / 1e3 / tokens
    per_token["host and dispatch"] = max(0.0, decode_s * 1e3 / tokens - sum(per_token.values()))
    return {"weights": weights, "tokens_per_s": round(tokens / decode_s, 2),
            "ms_per_token": round(decode_s * 1e3 / tokens, 3), "weight_bytes": result["metrics"].get("weight_bytes"),
            "ms_per_token_by_part": {c: round(per_token.get(c, 0.0), 3) for c in CATEGORIES}}


def _result(spec: Any) -> Any:
    """A run's Result, not judged (the judge's reference pass is no part of decoding)."""
    from playground.runner import run_to_result

    return run_to_result(PROMPT, spec, judged=False)


def _events(path: Path) -> list[dict[str, Any]]:
    loaded = json.loads(gzip.open(path).read())
    return loaded["traceEvents"] if isinstance(loaded, dict) else loaded


def _span(events: list[dict[str, Any]], function: str) -> float | None:
    """Seconds the traced Python function `function` took (the JAX loop's decode)."""
    spans = [e["dur"] for e in events if e.get("ph") == "X" and e["name"].endswith(f" {function}")]
    return sum(spans) / 1e6 if spans else None


def _thunks(events: list[dict[str, Any]]) -> collections.Counter[str]:
    """Microseconds per HLO instruction of the decode program, summed over its executions."""
    total: collections.Counter[str] = collections.Counter()
    for event in events:
        args = event.get("args") or {}
        if event.get("ph") == "X" and args.get("hlo_module") == DECODE_MODULE and "hlo_op" in args:
            total[args["hlo_op"]] += event.get("dur", 0)
    return total


def _instructions(path: Path) -> dict[str, dict[str, str]]:
    """Instruction name -> its opcode, result shape, line and (for a fusion) the fused computation's text."""
    computations: dict[str, list[str]] = {}
    found: dict[str, dict[str, str]] = {}
    current = ""
    for line in path.read_text().splitlines():
        header = COMPUTATION.match(line)
        if header and "=" not in line.split("{")[0]:
            current = header.group(1)
            continue
        computations.setdefault(current, []).append(line)
        match = INSTRUCTION.match(line)
        if match:
            found.setdefault(match.group(1), {"shape": match.group(2), "opcode": match.group(3), "line": line})
    for instruction in found.values():
        called = re.search(r"calls=%?([\w.\-]+)", instruction["line"])
        instruction["body"] = "\n".join(computations.get(called.group(1), ())) if called else ""
    return found


def _category(instruction: dict[str, str] | None) -> str | None:
    """What an instruction does (CATEGORIES), or None for a container whose body is timed on its own."""
    if instruction is None:
        return "norms, rope, activations and the rest"
    opcode, line, body = instruction["opcode"], instruction["line"], instruction["body"]
    if opcode in CONTAINERS:
        return None
    text = line + "\n" + body
    dots = [d for d in text.splitlines() if re.search(r"\sdot\(", d)]
    if dots:
        return "attention over the cache" if any("lhs_batch_dims" in d for d in dots) else "weight matvecs"
    dims = re.search(r"\[([\d,]*)\]", instruction["shape"])
    rank = len(dims.group(1).split(",")) if dims and dims.group(1) else 0
    if "dynamic-update-slice" in text and rank >= 4:
        return "cache writes"
    if re.search(r"top_k|reduce_max|argmax|sort|iota|threefry|random|scatter|log_softmax|cumsum", text):
        return "token choice and records"
    return "norms, rope, activations and the rest"


def format_table(result: dict[str, Any]) -> str:
    """One line per precision: tok/s, then ms per token by part."""
    lines = [f"a JAX decode step by part, {result['model']}, {result['new_tokens']} tokens, static cache "
             f"({result['cpu']}, load {result['load']:.1f}); ms per token"]
    short = ("matvecs", "attention", "cache", "records", "rest", "host")
    lines.append(f"  {'weights':8}{'tok/s':>8}{'total':>8}" + "".join(f"{s:>11}" for s in short))
    for row in result["rows"]:
        parts = row["ms_per_token_by_part"]
        lines.append(f"  {row['weights']:8}{row['tokens_per_s']:8.1f}{row['ms_per_token']:8.2f}"
                     + "".join(f"{parts[c]:11.2f}" for c in CATEGORIES))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="profile one JAX decode (run by run_profile_suite)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--weights", required=True, choices=PRECISIONS)
    parser.add_argument("--max-new-tokens", type=int, required=True)
    parser.add_argument("--folder", type=Path, required=True)
    args = parser.parse_args()
    print(json.dumps(profile_one(args.model, args.weights, args.max_new_tokens, args.folder)))


if __name__ == "__main__":
    main()

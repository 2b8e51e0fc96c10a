"""llama.cpp beside the playground on the same CPU, in one window: scripts/peer-bench.sh builds llama.cpp's tools
and calls this.

Rows, interleaved by precision so that the machine's drift falls on every engine alike: llama-bench's tg128 and
pp512 on the bundled SmolLM2 file at F32, Q8_0 (both made from its Q4_1 with llama-quantize --allow-requantize,
so both engines read the same weight values) and Q4_1; `python -m playground run` at fp32, int8 and q4 on JAX
and PyTorch eager and torch.compile at fp32, 128 greedy tokens (tg128) and a 512-token prompt (pp512), each
`--repeats 3`. A decode row's roofline share is its tokens/s times the bytes a step reads over the read
bandwidth: a jitted sum over 1 GiB, sampled before every row, or the fastest weight read a decode row achieved
where that is higher (a roofline nothing passes). Prefill is bound by arithmetic, not reads, so its rows carry
none.

Run: scripts/peer-bench.sh [--json] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from playground.device import cpu_name

NEW_TOKENS = 128
PROMPT_TOKENS = 512
REPEATS = 3
DECODE_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
# llama.cpp file type per precision, and the playground configurations that read the same precision
PRECISIONS = (("F32", (("jax", "fp32"), ("torch", "fp32"), ("torch.compile", "fp32"))),
              ("Q8_0", (("jax", "int8"),)),
              ("Q4_1", (("jax", "q4"),)))


def llama_bench(binary: Path, model: Path, threads: int) -> dict[str, float]:
    """{"tg128": tok/s, "pp512": tok/s, "bytes": the file's weight bytes} from one llama-bench call."""
    out = subprocess.run([str(binary), "-m", str(model), "-p", str(PROMPT_TOKENS), "-n", str(NEW_TOKENS),
                          "-t", str(threads), "-r", str(REPEATS), "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    found: dict[str, float] = {}
    for test in json.loads(out):
        name = f"tg{test['n_gen']}" if test["n_gen"] else f"pp{test['n_prompt']}"
        found[name] = float(test["avg_ts"])
        found["bytes"] = float(test["model_size"])
    return found


def playground_run(engine: str, weights: str, prompt_file: Path | None) -> dict[str, Any]:
    """One `python -m playground run ... --repeats 3 --json` process; its Result's metrics."""
    backend = "jax" if engine == "jax" else "torch"
    args = [sys.executable, "-m", "playground", "run", "--backend", backend, "--weights", weights,
            "--cache", "static", "--repeats", str(REPEATS), "--json"]
    if engine == "torch.compile":
        args += ["--torch-compile", "default"]
    if prompt_file is None:
        args += ["--prompt", DECODE_PROMPT, "--max-new-tokens", str(NEW_TOKENS), "--min-new-tokens", str(NEW_TOKENS)]
    else:
        args += ["--prompt-file", str(prompt_file), "--no-chat", "--max-new-tokens", "1"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    return {**result["metrics"], "prompt_tokens": result["prompt_tokens"]}


def long_prompt(path: Path, tokenizer_file: Path) -> Path:
    """A text of exactly PROMPT_TOKENS tokens for the model's tokenizer, written to `path`."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    words = " ".join(f"The {i}th lighthouse stood on the cliff above the harbour." for i in range(200))
    ids = tokenizer.encode(words, add_special_tokens=False).ids[:PROMPT_TOKENS]
    path.write_text(tokenizer.decode(ids))
    return path


def quantized_files(quantize: Path, source: Path, into: Path, threads: int) -> dict[str, Path]:
    """The bundled Q4_1 file and F32 / Q8_0 files requantized from it (made once, kept in `into`)."""
    files = {"Q4_1": source}
    for kind in ("F32", "Q8_0"):
        target = into / f"{source.stem}.{kind}.gguf"
        if not target.exists():
            subprocess.run([str(quantize), "--allow-requantize", str(source), str(target), kind, str(threads)],
                           check=True, capture_output=True, text=True)
        files[kind] = target
    return files


def ours_bytes(metrics: dict[str, Any], weights: str, embedding_bytes: int) -> float:
    """Bytes a decode step reads: the engine's weights less the fp32 embedding table where the quantized head is
    a copy of its own (a step gathers one row of the table)."""
    return float(metrics["weight_bytes"] - (embedding_bytes if weights != "fp32" else 0))


def share(tokens_per_s: float | None, nbytes: float, bandwidth_gbs: float) -> float | None:
    return round(tokens_per_s * nbytes / (bandwidth_gbs * 1e9), 3) if tokens_per_s else None


def measure(bin_dir: Path, files_dir: Path, threads: int, rounds: int) -> dict[str, Any]:
    """Every row, `rounds` times over in the same order; each row the median of its rounds."""
    import gguf

    from playground.metrics import BandwidthProbe
    from playground.models.catalog import BUNDLED
    from playground.models.paths import converted_dir

    source = BUNDLED["smollm2-135m"].gguf_path(lambda *_: None)
    files = quantized_files(bin_dir / "llama-quantize", source, files_dir, threads)
    tokenizer = converted_dir() / "smollm2-135m" / "tokenizer.json"
    prompt = long_prompt(files_dir / "prompt-512.txt", tokenizer)
    tensors = gguf.GGUFReader(str(source)).tensors
    embedding = next(int(t.n_elements) * 4 for t in tensors if t.name == "token_embd.weight")
    probe = BandwidthProbe()
    samples: dict[tuple[str, str, str], list[tuple[float, float]]] = {}  # row -> [(tok/s, bytes)]
    try:
        for _ in range(rounds):
            for kind, ours in PRECISIONS:
                probe.sample()
                found = llama_bench(bin_dir / "llama-bench", files[kind], threads)
                for test in ("tg128", "pp512"):
                    samples.setdefault(("llama.cpp", kind, test), []).append((found[test], found["bytes"]))
                for engine, weights in ours:
                    probe.sample()
                    decode = playground_run(engine, weights, None)
                    nbytes = ours_bytes(decode, weights, embedding)
                    samples.setdefault((engine, weights, "tg128"), []).append((decode["tokens_per_s"], nbytes))
                    prefill = playground_run(engine, weights, prompt)
                    rate = prefill["prompt_tokens"] / prefill["ttft_s"] if prefill["ttft_s"] else 0.0
                    samples.setdefault((engine, weights, "pp512"), []).append((rate, nbytes))
    finally:
        probe.close()
    probed = statistics.median(probe.samples)
    rows, bandwidth = summarize(samples, probed)
    return {"rows": rows, "bandwidth_gbs": round(bandwidth, 2), "probed_bandwidth_gbs": round(probed, 2),
            "threads": threads, "rounds": rounds, "cpu": cpu_name(), "load": os.getloadavg()[0]}


def summarize(samples: dict[tuple[str, str, str], list[tuple[float, float]]],
              probed: float) -> tuple[list[dict[str, Any]], float]:
    """Each row's median over its rounds with its roofline share, and the roofline's read rate (GB/s): the probe's,
    or the fastest weight read a decode row achieved where that is higher, so that no share passes 1 (llama.cpp's
    F32 decode read 17% faster than the probe's jitted sum on the AMD EPYC)."""
    medians = {row: (statistics.median(v[0] for v in values), values[0][1]) for row, values in samples.items()}
    read = max((rate * nbytes / 1e9 for (_, _, test), (rate, nbytes) in medians.items() if test.startswith("tg")),
               default=0.0)
    bandwidth = max(probed, read)
    rows = [{"engine": engine, "precision": precision, "test": test, "tokens_per_s": round(rate, 2),
             "roofline_share": share(rate, nbytes, bandwidth) if test.startswith("tg") else None,
             "bytes_per_token": int(nbytes)}
            for (engine, precision, test), (rate, nbytes) in medians.items()]
    return rows, bandwidth


def ratios(rows: list[dict[str, Any]]) -> list[str]:
    """Each of ours against llama.cpp at the same precision and test."""
    peer = {"fp32": "F32", "int8": "Q8_0", "q4": "Q4_1"}
    by = {(r["engine"], r["precision"], r["test"]): r["tokens_per_s"] for r in rows}
    lines = []
    for (engine, precision, test), rate in by.items():
        theirs = by.get(("llama.cpp", peer.get(precision, ""), test))
        if engine != "llama.cpp" and theirs:
            lines.append(f"{engine} {precision} / llama.cpp {peer[precision]} {test}: {rate / theirs:.2f}x")
    return lines


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{result['cpu']}, {result['threads']} threads, read bandwidth {result['bandwidth_gbs']} GB/s "
             f"(probe median {result['probed_bandwidth_gbs']} GB/s), load {result['load']:.1f}, "
             f"{result['rounds']} round(s)", "",
             f"{'engine':<15}{'precision':<11}{'test':<7}{'tok/s':>9}{'% roofline':>12}"]
    for r in result["rows"]:
        roof = f"{r['roofline_share'] * 100:11.0f}%" if r["roofline_share"] is not None else f"{'-':>12}"
        lines.append(f"{r['engine']:<15}{r['precision']:<11}{r['test']:<7}{r['tokens_per_s']:>9.1f}{roof}")
    return "\n".join(lines + [""] + ratios(result["rows"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-bin", type=Path, required=True, help="folder holding llama-bench, llama-quantize")
    parser.add_argument("--files", type=Path, required=True, help="folder for the requantized GGUF files")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("THREADS", 0)) or os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        result = measure(args.llama_bin, args.files, args.threads, args.rounds)
    except subprocess.CalledProcessError as failed:
        said = (failed.stderr or "").strip().splitlines()
        sys.exit(f"error: {' '.join(map(str, failed.cmd[:4]))} ... failed ({said[-1] if said else failed})")
    print(json.dumps(result) if args.json else format_table(result))


if __name__ == "__main__":
    main()

"""`bench --suite weights`: every weight precision on both backends, in one process, on one prompt.

Per backend and precision: greedy, beam-4 and prompt-lookup tokens/s on the grounded prompt (each the median of
`rounds` timed runs after a warm-up run that loads and compiles), the bytes of weights a step reads, and the
quality cost: the mean KL (nats) of the next-token distribution from the fp32 model's, over KL_STEPS
teacher-forced steps of fp32 greedy's own tokens on each of KL_PROMPTS, and the first token where the
precision's greedy output leaves fp32 greedy's on the grounded prompt. Every run goes through the runner, as
the page's do.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

from playground.backends.torch.reference import logprobs_along, mean_kl, reference_greedy
from playground.compatibility import weights_refusal
from playground.models.loaded import LOADED
from playground.result import Result
from playground.runner import backend_for, encode_prompt, run_to_result
from playground.spec import RunSpec
from playground.tools.bench_assisted import GROUNDED_PROMPT, PROMPT_LOOKUP

PRECISIONS = {"torch": ("fp32", "bf16", "int8", "nf4"), "jax": ("fp32", "int8", "q4")}
GREEDY_CACHE = {"torch": "dynamic", "jax": "static"}  # each backend's default in `bench`
BEAMS = 4
KL_STEPS = 64
KL_PROMPTS = ("List the days of the week.", "Name three primary colours.", "What is the capital of France?",
              "Count from one to ten in words.")


def _strategies() -> dict[str, dict[str, Any]]:
    return {"greedy": {"strategy": "greedy"}, f"beam{BEAMS}": {"strategy": "beam", "num_beams": BEAMS},
            "prompt_lookup": {"strategy": "assisted", "prompt_lookup": PROMPT_LOOKUP}}


def _rate(values: dict[str, Any], rounds: int) -> tuple[float | None, Result]:
    """Median tokens/s of `rounds` timed runs after a warm-up run; and the last run's Result."""
    run_to_result(GROUNDED_PROMPT, RunSpec.from_dict(values))
    result = run_to_result(GROUNDED_PROMPT, RunSpec.from_dict({**values, "repeats": rounds}))
    return result["metrics"]["tokens_per_s"], result


def _first_difference(tokens: list[int], reference: list[int]) -> int | None:
    return next((i for i, (a, b) in enumerate(zip(tokens, reference, strict=False)) if a != b), None)


def fp32_references(model: str) -> list[tuple[list[int], list[int], torch.Tensor]]:
    """Per prompt of KL_PROMPTS: its ids, fp32 greedy's KL_STEPS tokens on it, and the fp32 torch model's
    log-probabilities along them (every position attended). Computed once per suite, shared by every row."""
    reference = LOADED.get(model, "fp32")[0]
    found = []
    for text in KL_PROMPTS:
        ids = encode_prompt(reference, text, None)
        forced = reference_greedy(reference.model, torch.tensor([ids]), KL_STEPS)
        found.append((ids, forced, logprobs_along(reference.model, torch.tensor([ids]), forced)))
    return found


def kl_from_fp32(model: str, backend: str, weights: str,
                 references: list[tuple[list[int], list[int], torch.Tensor]]) -> float:
    """Mean KL from the fp32 torch model's next-token distributions, over the references' tokens."""
    spec = RunSpec(model=model, backend=backend, weights=weights, cache="static", max_new_tokens=KL_STEPS)
    runner_backend = backend_for(backend)
    mine = LOADED.get(model, runner_backend.source_weights(spec))[0]
    return statistics.fmean(mean_kl(full, runner_backend.logprobs_along(mine, spec, ids, forced))
                            for ids, forced, full in references)


def run_weights_suite(model: str, new_tokens: int, progress: Callable[[str], Any], rounds: int = 3) -> dict[str, Any]:
    """A row per backend x precision, and the ratios the JAX path's int8 is judged by."""
    rows = []
    reference_tokens: list[int] | None = None
    references: list[tuple[list[int], list[int], torch.Tensor]] | None = None
    for backend, precisions in PRECISIONS.items():
        for weights in (w for w in precisions if weights_refusal(backend, w) is None):  # this device runs it
            row: dict[str, Any] = {"backend": backend, "weights": weights}
            for name, knobs in _strategies().items():
                progress(f"{backend} {weights}: {name}, {new_tokens} tokens, warm-up + {rounds} timed")
                values = {"model": model, "backend": backend, "weights": weights, "cache": GREEDY_CACHE[backend],
                          "max_new_tokens": new_tokens, "min_new_tokens": new_tokens, **knobs}
                row[f"{name}_tok_s"], result = _rate(values, rounds)
                if name == "greedy":
                    row["weight_bytes"] = result["metrics"]["weight_bytes"]
                    reference_tokens = reference_tokens or result["token_ids"]  # torch fp32 comes first
                    row["leaves_fp32_greedy_at"] = _first_difference(result["token_ids"], reference_tokens)
            progress(f"{backend} {weights}: KL from fp32 over {len(KL_PROMPTS)} prompts x {KL_STEPS} steps")
            if weights != "fp32":
                references = references or fp32_references(model)
                row["kl_vs_fp32"] = float(f"{kl_from_fp32(model, backend, weights, references):.4g}")
            else:
                row["kl_vs_fp32"] = None
            rows.append(row)
    return {"model": model, "new_tokens": new_tokens, "prompt": "grounded", "rounds": rounds, "rows": rows,
            "ratios": _ratios(rows)}


def _ratios(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The issue's targets as ratios within this one run."""
    by = {(r["backend"], r["weights"]): r for r in rows}

    def ratio(top: tuple[str, str, str], bottom: tuple[str, str, str]) -> float | None:
        """None where either row was not run."""
        a, b = (by.get(key[:2], {}).get(f"{key[2]}_tok_s") for key in (top, bottom))
        return round(a / b, 3) if a and b else None

    beam = f"beam{BEAMS}"
    return {
        "jax_int8_vs_jax_fp32": ratio(("jax", "int8", "greedy"), ("jax", "fp32", "greedy")),
        "jax_int8_vs_torch_fp32": ratio(("jax", "int8", "greedy"), ("torch", "fp32", "greedy")),
        "jax_q4_vs_jax_fp32": ratio(("jax", "q4", "greedy"), ("jax", "fp32", "greedy")),
        "jax_q4_vs_jax_int8": ratio(("jax", "q4", "greedy"), ("jax", "int8", "greedy")),
        "jax_beam4_vs_torch_beam4_fp32": ratio(("jax", "fp32", beam), ("torch", "fp32", beam)),
        "jax_beam4_vs_torch_beam4_int8": ratio(("jax", "int8", beam), ("torch", "int8", beam)),
        "jax_prompt_lookup_vs_jax_greedy_fp32": ratio(("jax", "fp32", "prompt_lookup"), ("jax", "fp32", "greedy")),
        "jax_prompt_lookup_vs_jax_greedy_int8": ratio(("jax", "int8", "prompt_lookup"), ("jax", "int8", "greedy")),
    }


def format_table(result: dict[str, Any]) -> str:
    def cell(value: Any, fmt: str, width: int) -> str:
        return format(value, fmt) if value is not None else format("-", f">{width}")

    lines = [f"model {result['model']}, {result['new_tokens']} new tokens on the grounded prompt, median of "
             f"{result['rounds']} runs each", "",
             f"{'backend':<8}{'weights':<8}{'greedy':>9}{'beam4':>9}{'lookup':>9}{'MB':>8}{'KL nats':>10}"
             f"{'leaves at':>11}"]
    for r in result["rows"]:
        lines.append(f"{r['backend']:<8}{r['weights']:<8}{cell(r['greedy_tok_s'], '9.1f', 9)}"
                     f"{cell(r['beam4_tok_s'], '9.1f', 9)}{cell(r['prompt_lookup_tok_s'], '9.1f', 9)}"
                     f"{r['weight_bytes'] / 1e6:8.0f}{cell(r['kl_vs_fp32'], '10.2g', 10)}"
                     f"{cell(r['leaves_fp32_greedy_at'], '11d', 11)}")
    lines += ["", "tok/s: greedy, beam search with 4 beams, prompt lookup (10 drafts); MB: the weights a step reads",
              "ratios: " + ", ".join(f"{k} {v}x" for k, v in result["ratios"].items())]
    return "\n".join(lines)

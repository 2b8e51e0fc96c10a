"""`bench --suite reuse`: what the prefix store saves, cache by cache, on both backends.

Each row keeps a shared prefix of Hamlet (512, 2048 or 4096 tokens) in the store, then runs the prefix plus 32
new tokens twice: cold (`reuse` off) and warm (from the kept prefix), and gives both TTFTs, the tokens reused,
whether the warm run's tokens and probabilities are the cold run's, and the store's bytes. A cache or backend the
store does not take gives its reason instead. The `step` row times step mode on the store: a Step at a 1024-token
prompt against a decode step of a plain run of the same model.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from playground import registry
from playground.backends.prefix_store import STORE
from playground.data.text_files import DEFAULT_TEXT
from playground.models.loaded import LOADED
from playground.result import Result
from playground.runner import backend_for, run_to_result
from playground.spec import RunSpec

SHARED = (512, 2048, 4096)
NEW_TOKENS = 32
STEP_PROMPT = 1024
STEPS = 5
GENERATED = 8  # tokens each timed run generates: enough to compare warm and cold token by token
EXACT_P = 1e-5


@contextmanager
def _long_prompts(tokens: int) -> Iterator[None]:
    """Raise PLAYGROUND_MAX_PROMPT_TOKENS for the suite's own prompts (as far as the longest needs)."""
    name = "PLAYGROUND_MAX_PROMPT_TOKENS"
    before = os.environ.get(name)
    if before is None or int(before) < tokens:
        os.environ[name] = str(tokens)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _result(prompt: str, spec: RunSpec, scope: str) -> Result:
    return run_to_result(prompt, spec, judged=False, scope=scope)


def _texts(model: str) -> tuple[Any, list[int]]:
    loaded, _ = LOADED.get(model, "fp32")
    return loaded.tokenizer, loaded.tokenizer(DEFAULT_TEXT.read_text()).input_ids


def exactness(warm: Result, cold: Result) -> bool | dict[str, Any]:
    """True where the warm run's tokens are the cold run's and each p and p_model within 1e-5; else where they
    part and by how much."""
    if warm["token_ids"] != cold["token_ids"]:
        first = next(i for i, (a, b) in enumerate(zip(warm["token_ids"], cold["token_ids"], strict=False)) if a != b)
        return {"first_differing_token": first}
    gap = max((abs(float(a[key] or 0.0) - float(b[key] or 0.0))
               for a, b in zip(warm["tokens"], cold["tokens"], strict=True) for key in ("p", "p_model")), default=0.0)
    return True if gap <= EXACT_P else {"max_p_difference": gap}


def reuse_row(model: str, backend: str, cache: str, shared: int, tokenizer: Any, ids: list[int],
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row: the prefix kept, then its continuation cold and warm."""
    spec = RunSpec.from_dict({"model": model, "backend": backend, "cache": cache, "max_new_tokens": GENERATED,
                              "chat": False, **(extra or {})})
    label = cache + "".join(f"-{value}" for value in (extra or {}).values())  # "dynamic-bf16", "quantized-8"
    row: dict[str, Any] = {"backend": backend, "cache": label, "shared_tokens": shared,
                           "new_tokens": NEW_TOKENS}
    loaded, _ = LOADED.get(model, backend_for(backend).source_weights(spec))
    refusal = backend_for(backend).reuse_refusal(loaded, spec)
    if refusal is not None:
        return row | {"reused_tokens": 0, "note": refusal}
    STORE.clear()
    scope = f"bench-reuse:{backend}:{cache}:{shared}"
    prefix, whole = tokenizer.decode(ids[:shared]), tokenizer.decode(ids[:shared + NEW_TOKENS])
    _result(prefix, spec.replace(max_new_tokens=1), scope)  # keeps the prefix
    cold = _result(whole, spec.replace(reuse=False), scope)
    warm = _result(whole, spec, scope)
    record = warm["reuse"]
    return row | {"ttft_cold_s": cold["metrics"]["ttft_s"], "ttft_warm_s": warm["metrics"]["ttft_s"],
                  "reused_tokens": record["reused_tokens"], "exact": row_exactness(warm, cold),
                  "store_bytes": record["store_bytes"]}


def row_exactness(warm: Result, cold: Result) -> bool | dict[str, Any]:
    """`exactness`, and for a restored cache (whose warm run the backend measured against the cold one) the KL
    against cold and the first new token whose most likely token differs, where it is not exact."""
    exact, record = exactness(warm, cold), warm["reuse"]
    if record.get("kl_vs_cold") is None or (exact is True and record["exact"]):
        return exact
    return {"kl_vs_cold": record["kl_vs_cold"], "kl_vs_cold_max": record["kl_vs_cold_max"],
            "first_difference": record["first_difference"], **(exact if isinstance(exact, dict) else {})}


def step_row(model: str, backend: str, tokenizer: Any, ids: list[int],
             prompt_tokens: int = STEP_PROMPT) -> dict[str, Any]:
    """Seconds per Step at a `prompt_tokens`-token prompt (the steps after the first, each from the one before it in
    the store), against seconds per decode token of a plain run of the same model."""
    prompt = tokenizer.decode(ids[:prompt_tokens])
    # as the page steps a tree: on JAX every step sized for the whole tree, so later steps compile nothing
    spec = RunSpec(model=model, backend=backend, chat=False, max_new_tokens=1,
                   sized_new_tokens=32 if backend == "jax" else 0)
    plain = _result(prompt, spec.replace(max_new_tokens=32, reuse=False, sized_new_tokens=0), "bench-step-plain")
    STORE.clear()
    path: list[int] = []
    seconds = []
    for _ in range(STEPS):
        result = _result(prompt, spec.replace(prefix_ids=tuple(path), max_new_tokens=1), f"bench-step:{backend}")
        seconds.append(result["metrics"]["total_s"])
        path += result["token_ids"]
    rate = plain["metrics"]["tokens_per_s"]
    decode_s = 1 / rate if rate else None
    step_s = statistics.median(seconds[1:])
    return {"backend": backend, "cache": "dynamic", "step": True, "prompt_tokens": prompt_tokens,
            "step_s": round(step_s, 4), "first_step_s": round(seconds[0], 4),
            "decode_token_s": round(decode_s, 4) if decode_s else None,
            "step_vs_decode": round(step_s / decode_s, 2) if decode_s else None}


def run_reuse_suite(model: str, progress: Callable[[str], Any], shared: tuple[int, ...] = SHARED,
                    step_prompt: int = STEP_PROMPT) -> dict[str, Any]:
    """Every cache on both backends at each shared length, then the step row per backend."""
    rows: list[dict[str, Any]] = []
    tokenizer, ids = _texts(model)
    with _long_prompts(max(shared) + NEW_TOKENS + 8):
        for backend in ("torch", "jax"):
            for cache in registry.cache_names():
                for length in shared:
                    progress(f"{backend} {cache}: {length} shared + {NEW_TOKENS} new tokens")
                    rows.append(reuse_row(model, backend, cache, length, tokenizer, ids))
            for length in shared:
                progress(f"{backend} dynamic, bf16 store: {length} shared + {NEW_TOKENS} new tokens")
                rows.append(reuse_row(model, backend, "dynamic", length, tokenizer, ids, {"cache_dtype": "bf16"}))
            progress(f"{backend}: step mode at {step_prompt} prompt tokens")
            rows.append(step_row(model, backend, tokenizer, ids, step_prompt))
    STORE.clear()
    return {"model": model, "rows": rows}


def format_table(result: dict[str, Any]) -> str:
    lines = [f"prefix reuse, {result['model']}"]
    for row in result["rows"]:
        if row.get("step"):
            lines.append(f"  {row['backend']:5} step at {row['prompt_tokens']} tokens: {row['step_s']} s/step, "
                         f"decode {row['decode_token_s']} s/token ({row['step_vs_decode']}x)")
        elif "ttft_cold_s" in row:
            lines.append(f"  {row['backend']:5} {row['cache']:13} {row['shared_tokens']:5}+{row['new_tokens']}: "
                         f"TTFT cold {row['ttft_cold_s']:.3f} s, warm {row['ttft_warm_s']:.3f} s, reused "
                         f"{row['reused_tokens']}, exact {row['exact']}, store {row['store_bytes'] / 2**20:.1f} MiB")
        else:
            lines.append(f"  {row['backend']:5} {row['cache']:13} {row['shared_tokens']:5}: cold ({row['note']})")
    return "\n".join(lines)

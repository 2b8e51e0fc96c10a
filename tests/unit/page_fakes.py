"""Fake results, page inputs and settings for the page's tests: what a finished run hands the page, without
running one."""

from __future__ import annotations

from typing import Any

from playground.spec import RunSpec
from playground.ui.export import page_settings

VERSIONS = {"torch": "2.13.0", "transformers": "5.23.0", "jax": None, "torchax": None, "gradio": "6.31.0"}


def fake_result(ids: list[int], speed: float = 10.0, ttft: float = 0.5, acceptance: float | None = None,
                strategy: str = "greedy", runs: list[float] | None = None) -> dict[str, Any]:
    texts = [f"t{i}" for i in ids]
    return {
        "spec": {**RunSpec(strategy=strategy, prompt_lookup=10 if strategy == "assisted" else 0).to_dict(),
                 "chat": True},
        "text": "".join(texts), "sequences": ["".join(texts)],
        "prompt_tokens": 5, "new_tokens": len(ids), "token_ids": ids, "forward_passes": len(ids), "stopped": False,
        "metrics": {"load_s": 1.0, "compile_s": 0.0, "ttft_s": ttft, "total_s": 2.0, "tokens_per_s": float(speed),
                    "ms_per_token_p50": 1000 / speed, "ms_per_token_p90": 1200 / speed, "kv_cache_bytes": 2**20,
                    "weight_bytes": 100 * 2**20, "peak_rss_bytes": 900 * 2**20, "acceptance_rate": acceptance,
                    **({"tokens_per_s_runs": runs} if runs else {})},
        "versions": VERSIONS,
        "tokens": [{"id": i, "text": t, "p": 0.9, "entropy": 0.3, "p_model": 0.8, "entropy_model": 0.4,
                    "top": [[t, 0.9, 0.8], ["x", 0.05, 0.1]], "draft": None}
                   for i, t in zip(ids, texts, strict=True)],
        "timeline": {"token_ms": [100.0, 90.0][: max(len(ids) - 1, 0)], "token_steps": [2, 3][: max(len(ids) - 1, 0)],
                     "kv_cache_bytes": [2**19, 2**20]},
        "scores": None,
        "beam_tree": None,
        "extra": {},
    }



def row(table: dict[str, Any], prefix: str) -> list[str]:
    return next(r[1:] for r in table["data"] if r[0].startswith(prefix))


SETTINGS = page_settings("Hi <there> & 'you'", 7, "raw", [
    {"model": "smollm2-135m", "strategy": "greedy", "cache": "static", "max_new_tokens": 24},
    {"model": "smollm2-135m", "strategy": "sampling", "cache": "dynamic", "temperature": 0.7, "top_p": 0.9},
])


def page_data(page, changes: dict[Any, Any] | None = None) -> dict[Any, Any]:
    """The values the page would send: every component's current default, changed where asked."""
    data = {page.prompt: "Hello", page.seed: 3, page.repeats: 1, page.mode: "raw",
            page.visible: [True, True, False, False],
            page.conversation: [], page.colour_by: "probability (as drawn)"}
    for col in page.columns:
        for component in col.knobs.values():
            data[component] = component.value
    data.update(changes or {})
    return data

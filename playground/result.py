"""The Result JSON as types (Result, Metrics, TokenRecord, Timeline) and how a backend's output becomes one.

The keys are a contract (DESIGN.md): the CLI prints this object, the API returns it, the page and the exports
read it. Every reader goes through these types, so a renamed key is a type error, not a blank cell.
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING, Any, TypedDict

from playground.backends.base import GenerationOutput
from playground.metrics import per_token_latencies, percentile

if TYPE_CHECKING:  # type names only: building a Result needs no model code
    from playground.models.loaded import LoadedModel
    from playground.spec import RunSpec


class Metrics(TypedDict):
    """Timings in seconds (ms where the key says so), sizes in bytes; None where a figure does not exist."""

    load_s: float
    compile_s: float
    ttft_s: float | None
    total_s: float
    tokens_per_s: float | None
    ms_per_token_p50: float | None
    ms_per_token_p90: float | None
    kv_cache_bytes: int
    peak_rss_bytes: int | None
    acceptance_rate: float | None


class TokenRecord(TypedDict):
    """One generated token of the first sequence, with what the backend knew about it."""

    id: int
    text: str
    p: float | None  # under the distribution the token was drawn from (after every processor and filter)
    entropy: float | None
    p_model: float | None  # under the model's own softmax at temperature 1, before any processor
    entropy_model: float | None
    top: list[tuple[str, float, float]] | None  # the model's most likely tokens: (text, p, p_model)
    draft: bool | None  # assisted: an accepted draft token (True) or the main model's own (False)


class Timeline(TypedDict):
    token_ms: list[float]  # per decoded token after the first
    kv_cache_bytes: list[int]  # after each decoding step


class Result(TypedDict):
    spec: dict[str, Any]  # every RunSpec key, normalized (chat resolved to what was applied)
    text: str
    sequences: list[str]
    prompt_tokens: int
    new_tokens: int
    token_ids: list[int]
    metrics: Metrics
    versions: dict[str, str | None]
    tokens: list[TokenRecord]
    timeline: Timeline
    scores: list[float] | None
    forward_passes: int | None
    stopped: bool
    extra: dict[str, Any]


def versions() -> dict[str, str | None]:
    """Package versions read from metadata, so reporting them never imports jax or gradio."""
    found: dict[str, str | None] = {}
    for name in ("torch", "transformers", "jax", "torchax", "gradio"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def build_metrics(output: GenerationOutput, end_time: float, load_s: float, peak_rss: int | None) -> Metrics:
    """The metrics block; None where a figure does not exist for this run (e.g. per-token times of beam search)."""
    times = output.token_times
    new_tokens = len(output.sequences[0]) if output.sequences else 0
    total_s = end_time - output.start_time
    latencies = per_token_latencies(times)
    tokens_per_s: float | None
    if latencies:
        tokens_per_s = len(latencies) / sum(latencies) if sum(latencies) > 0 else None
    elif new_tokens and total_s > 0:
        tokens_per_s = new_tokens / total_s  # no per-token times (beam search): whole-run rate
    else:
        tokens_per_s = None
    p50, p90 = percentile(latencies, 50), percentile(latencies, 90)
    return {
        "load_s": round(load_s, 4),
        "compile_s": round(output.compile_s, 4),
        "ttft_s": round(times[0] - output.start_time, 4) if times else None,
        "total_s": round(total_s, 4),
        "tokens_per_s": round(tokens_per_s, 3) if tokens_per_s else None,
        "ms_per_token_p50": round(p50 * 1000, 3) if p50 is not None else None,
        "ms_per_token_p90": round(p90 * 1000, 3) if p90 is not None else None,
        "kv_cache_bytes": int(output.kv_cache_bytes),
        "peak_rss_bytes": None if peak_rss is None else int(peak_rss),
        "acceptance_rate": output.acceptance_rate,
    }


def token_records(tokenizer: Any, output: GenerationOutput) -> list[TokenRecord]:
    """One record per generated token of the first sequence."""
    ids = output.sequences[0] if output.sequences else []
    info = output.token_info or [{}] * len(ids)
    drafts: list[bool | None] = list(output.draft_flags) if output.draft_flags else [None] * len(ids)
    records: list[TokenRecord] = []
    for token, known, draft in zip(ids, info, drafts, strict=False):
        top = known.get("top")
        records.append({
            "id": token,
            "text": tokenizer.decode([token]),
            "p": _round(known.get("p")),
            "entropy": _round(known.get("entropy")),
            "p_model": _round(known.get("p_model")),
            "entropy_model": _round(known.get("entropy_model")),
            "top": [(tokenizer.decode([i]), round(p, 5), round(q, 5)) for i, p, q in top] if top else None,
            "draft": draft,
        })
    return records


def build_result(spec: RunSpec, loaded: LoadedModel, prompt_tokens: int, output: GenerationOutput,
                 end: float, load_s: float, peak_rss: int | None) -> Result:
    """The Result of one run: texts decoded, metrics summarized, the spec normalized."""
    tokenizer = loaded.tokenizer
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in output.sequences]
    latencies = per_token_latencies(output.token_times)
    spec_dict = spec.to_dict()
    spec_dict["chat"] = loaded.instruct if spec.chat is None else spec.chat
    return {
        "spec": spec_dict,
        "text": texts[0] if texts else "",
        "sequences": texts,
        "prompt_tokens": int(prompt_tokens),
        "new_tokens": len(output.sequences[0]) if output.sequences else 0,
        "token_ids": list(output.sequences[0]) if output.sequences else [],
        "metrics": build_metrics(output, end, load_s, peak_rss),
        "versions": versions(),
        "tokens": token_records(tokenizer, output),
        "timeline": {"token_ms": [round(x * 1000, 3) for x in latencies], "kv_cache_bytes": output.kv_trace},
        "scores": output.scores,
        "forward_passes": output.forward_passes,
        "stopped": output.stopped,
        "extra": output.extra,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 5)

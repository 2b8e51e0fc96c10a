"""The Result JSON as types (Result, Metrics, TokenRecord, Timeline) and how a backend's output becomes one.

The keys are a contract (docs/api.md): the CLI prints this object, the API returns it, the page and the exports
read it. Every reader goes through these types, so a renamed key is a type error, not a blank cell.
"""

from __future__ import annotations

import importlib.metadata
import math
import statistics
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from playground import device, registry
from playground.backends.base import GenerationOutput, TokenInfo
from playground.backends.prefix_store import ReuseRecord
from playground.constraints.record import ConstraintRecord, constraint_record
from playground.metrics import arrivals, percentile
from playground.strategy_records.composite import (
    StrategyMetrics,
    StrategyRunRecords,
    StrategyTokenRecords,
    strategy_metrics,
)

if TYPE_CHECKING:  # type names only: building a Result needs no model code
    from playground.models.loaded import LoadedModel
    from playground.spec import RunSpec


# The output judged by the fp32 model: mean log-prob per token, the token where it leaves fp32 greedy, and with
# weights other than fp32 the mean KL from fp32's next-token distributions (runner.py's _judge)
Quality = tuple[float | None, int | None, float | None]
NO_QUALITY: Quality = (None, None, None)


class Metrics(StrategyMetrics):
    """Timings in seconds (ms where the key says so), sizes in bytes; None where a figure does not exist (the
    figures only some strategies measure come from their records: `StrategyMetrics`).

    With repeats > 1 the timings are medians over the runs and every run's value is kept under `<key>_runs`.
    """

    load_s: float  # loading the models for this request (0 when they were already loaded)
    compile_s: float  # compiling before the prompt ran: JAX programs, or quanto's kernels (0 when nothing was built)
    ttft_s: float | None  # prompt in to first new token on the host, compile (and moving JAX weights) excluded
    total_s: float  # the generation's wall time, compile included, load excluded
    tokens_per_s: float | None  # decode rate: tokens after the first / their time
    ms_per_token_p50: float | None  # over arrivals (a token, a JAX chunk, accepted drafts + 1): ms per token
    ms_per_token_p90: float | None
    kv_cache_bytes: int  # held by the cache's tensors at the end of the run
    weight_bytes: int  # the model's weights at the run's precision (+ the draft model's)
    peak_rss_bytes: int | None  # the whole process, sampled during the run (not the column's own memory)
    mean_logprob: float | None  # the output under the fp32 model with a dynamic cache: mean log-prob per token
    greedy_divergence: int | None  # first token where that model's greedy choice differs; None: never
    kl_vs_fp32: NotRequired[float | None]  # weights other than fp32: mean KL (nats) of the next-token distribution
    # from the fp32 model's, along the output, both with full attention; absent with fp32 weights
    ttft_s_runs: NotRequired[list[float | None]]
    tokens_per_s_runs: NotRequired[list[float | None]]
    ms_per_token_p50_runs: NotRequired[list[float | None]]
    ms_per_token_p90_runs: NotRequired[list[float | None]]
    total_s_runs: NotRequired[list[float]]
    compile_s_runs: NotRequired[list[float]]


class Alternative(TypedDict):
    """One of the model's most likely tokens at a step, with what became of it before the draw."""

    id: int
    text: str
    p: float  # under the distribution the token was drawn from (0 when a filter removed it)
    p_model: float  # under the model's own softmax at temperature 1
    removed_by: str | None  # the first stage of the logits chain that removed it; None: it stayed
    logprob: NotRequired[float | None]  # ln p and ln p_model, unrounded (None: removed, p = 0)
    logprob_model: NotRequired[float | None]


class StageRecord(TypedDict):
    """What one stage of the logits chain did at a step."""

    stage: str  # its registry name
    removed: int  # tokens it removed
    moved: float  # probability mass it moved: total variation between the distributions before and after it


class TokenRecord(StrategyTokenRecords):
    """One generated token of the first sequence, with what the backend knew about it (the built-in strategies'
    own keys come from their records: `StrategyTokenRecords`; one registered beside them adds its key untyped,
    None on every other strategy's tokens)."""

    id: int
    text: str
    p: float | None  # under the distribution the token was drawn from (after every processor and filter)
    entropy: float | None
    p_model: float | None  # under the model's own softmax at temperature 1, before any processor
    entropy_model: float | None
    logprob: NotRequired[float | None]  # ln p, ln p_model of the unrounded p's; None where unknown or 0
    logprob_model: NotRequired[float | None]  # (vLLM's "processed" and "raw" log-probabilities)
    top: list[tuple[str, float, float]] | None  # the model's most likely tokens: (text, p, p_model)
    alternatives: NotRequired[list[Alternative] | None]  # `top` with ids and what removed each (the sampling cut)
    stages: NotRequired[list[StageRecord] | None]  # each active stage of the chain, in order (the sampling cut)
    state: NotRequired[dict[str, float] | None]  # carried when drawn: mirostat_mu (bits), adaptive_p_average


class PrefixRecord(TypedDict):
    """The forced tokens (RunSpec.prefix_ids) placed after the prompt: not generated, so not in `tokens`."""

    ids: list[int]
    text: str  # decoded together, as the output text starts
    pieces: list[str]  # each token's own text, for the token view


class AttentionLayers(TypedDict):
    """The model's attention layout, which decides what a cache keeps: each layer's type ("full_attention",
    "sliding_attention", ...) and the model's own sliding window (None when it has none)."""

    layer_types: list[str]
    sliding_window: int | None


class Timeline(TypedDict):
    token_ms: list[float]  # ms per token of each arrival after the first (a token, or a chunk of them)
    token_steps: list[int]  # tokens received by each of those arrivals (x axis of token_ms)
    kv_cache_bytes: list[int]  # after each decoding step


class Result(StrategyRunRecords):
    """One run (the built-in strategies' own top-level keys come from their records: `StrategyRunRecords`)."""

    spec: dict[str, Any]  # every RunSpec key, normalized (chat resolved to what was applied)
    text: str
    sequences: list[str]
    sequence_tokens: NotRequired[list[int]]  # new tokens of each returned sequence (the first: new_tokens)
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
    attention_layers: AttentionLayers
    extra: dict[str, Any]
    prefix: NotRequired[PrefixRecord | None]  # the forced first tokens; text, tokens and metrics are after them
    constraint: NotRequired[ConstraintRecord | None]  # a constrained run: its verdict and the mask's cost
    device: NotRequired[str]  # where it ran: "CPU (<processor>)" or "GPU (<name>)"
    reuse: NotRequired[ReuseRecord]  # what the prefix store did (runs of a page session or an API scope only)


def versions() -> dict[str, str | None]:
    """Package versions read from metadata, so reporting them never imports jax or gradio."""
    found: dict[str, str | None] = {}
    for name in ("torch", "transformers", "jax", "torchax", "gradio"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def build_metrics(output: GenerationOutput, end_time: float, load_s: float, peak_rss: int | None,
                  weight_bytes: int = 0, quality: Quality = NO_QUALITY) -> Metrics:
    """The metrics block of one run; None where a figure does not exist (per-token times of a strategy that
    streams nothing)."""
    times = output.token_times
    new_tokens = len(output.sequences[0]) if output.sequences else 0
    total_s = end_time - output.start_time
    timing = arrivals(times)
    tokens_per_s: float | None = None
    if timing.tokens and timing.seconds > 0:
        tokens_per_s = timing.tokens / timing.seconds
    elif not times and new_tokens and total_s - output.compile_s > 0:
        # no per-token times (nothing streamed): the whole run's rate, prefill included and compile left out, as
        # ttft_s leaves it out for the strategies that stream
        tokens_per_s = new_tokens / (total_s - output.compile_s)
    p50, p90 = percentile(timing.ms_per_token, 50), percentile(timing.ms_per_token, 90)
    metrics: Metrics = {
        "load_s": round(load_s, 4),
        "compile_s": round(output.compile_s, 4),
        "ttft_s": round(times[0] - output.start_time - output.compile_s, 4) if times else None,
        "total_s": round(total_s, 4),
        "tokens_per_s": round(tokens_per_s, 3) if tokens_per_s else None,
        "ms_per_token_p50": round(p50, 3) if p50 is not None else None,
        "ms_per_token_p90": round(p90, 3) if p90 is not None else None,
        "kv_cache_bytes": int(output.kv_cache_bytes),
        "weight_bytes": int(weight_bytes),
        "peak_rss_bytes": None if peak_rss is None else int(peak_rss),
        **strategy_metrics(output),
        "mean_logprob": quality[0],
        "greedy_divergence": quality[1],
    }
    if quality[2] is not None:
        metrics["kl_vs_fp32"] = quality[2]
    return metrics


# Timings that vary from run to run: repeated runs report their median and keep every value.
REPEATED_TIMINGS = ("ttft_s", "tokens_per_s", "ms_per_token_p50", "ms_per_token_p90", "total_s", "compile_s")


def _median(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 4) if present else None


def combine_runs(results: list[Result]) -> Result:
    """Repeated runs of one setting as one Result: the first run's tokens, text and timeline (seeded runs give
    the same tokens), the median of each timing with every run's value under `<key>_runs`, and the compile
    and load of the run that paid them."""
    first = results[0]
    if len(results) == 1:
        return first
    metrics: dict[str, Any] = dict(first["metrics"])
    for key in REPEATED_TIMINGS:
        runs = [r["metrics"][key] for r in results]  # type: ignore[literal-required]
        metrics[f"{key}_runs"] = runs
        metrics[key] = max(runs) if key == "compile_s" else _median(runs)
    metrics["load_s"] = max(r["metrics"]["load_s"] for r in results)
    peaks = [r["metrics"]["peak_rss_bytes"] for r in results if r["metrics"]["peak_rss_bytes"] is not None]
    metrics["peak_rss_bytes"] = max(peaks) if peaks else None
    combined: Result = {**first, "metrics": metrics}  # type: ignore[typeddict-item]
    combined["spec"] = {**first["spec"], "repeats": len(results)}
    loads: list[dict[str, Any]] = [load for r in results if (load := r.get("extra", {}).get("machine_load"))]
    if loads:  # the busiest run's: one contended run among the repeats still moves a median of three
        busiest = max(loads, key=lambda load: load["other_cpu_share"] + load["steal_share"])
        combined["extra"] = {**first.get("extra", {}), "machine_load": busiest}
    return combined


def token_records(tokenizer: Any, output: GenerationOutput, strategy: str) -> list[TokenRecord]:
    """One record per generated token of the first sequence, with `strategy`'s own records (registry)."""
    ids = output.sequences[0] if output.sequences else []
    info = output.token_info or [{}] * len(ids)
    records: list[TokenRecord] = []
    for token, known in zip(ids, info, strict=False):
        top = known.get("top")
        records.append({
            "id": token,
            "text": tokenizer.decode([token]),
            "p": _round(known.get("p")),
            "entropy": _round(known.get("entropy")),
            "p_model": _round(known.get("p_model")),
            "entropy_model": _round(known.get("entropy_model")),
            "logprob": log_probability(known.get("p")),
            "logprob_model": log_probability(known.get("p_model")),
            "top": [(tokenizer.decode([i]), round(p, 5), round(q, 5)) for i, p, q in top] if top else None,
            "alternatives": _alternatives(tokenizer, known),
            "stages": [{"stage": name, "removed": removed, "moved": round(moved, 5)}
                       for name, removed, moved in known["stages"]] if "stages" in known else None,
            "state": {name: round(value, 6) for name, value in known["state"].items()} if "state" in known else None,
        })
    _add_strategy_tokens(records, tokenizer, output, strategy)
    return records


def _add_strategy_tokens(records: list[TokenRecord], tokenizer: Any, output: GenerationOutput,
                         strategy: str) -> None:
    """Every registered strategy's token keys, None, then the running strategy's own values."""
    own = {declared.key: declared for declared in registry.strategy(strategy).token_records}
    for key in dict.fromkeys(d.key for entry in registry.strategies() for d in entry.token_records):
        values = own[key].build(tokenizer, output) if key in own else None
        padded = list(values or [])[: len(records)]
        padded += [None] * (len(records) - len(padded))
        for record, value in zip(records, padded, strict=True):
            record[key] = value  # type: ignore[literal-required]  # a registered key, not one of TypedDict's


def strategy_run_records(tokenizer: Any, output: GenerationOutput, strategy: str) -> dict[str, Any]:
    """Every registered strategy's top-level run keys, None, and the running strategy's own values (those it
    puts under `extra`, where the backend has not put them itself, go to `extra`)."""
    found: dict[str, Any] = {d.key: None for entry in registry.strategies() for d in entry.run_records
                             if not d.in_extra}
    extra: dict[str, Any] = {}
    for declared in registry.strategy(strategy).run_records:
        if declared.build is None:
            continue
        value = declared.build(tokenizer, output)
        if declared.in_extra:
            extra[declared.key] = value
        else:
            found[declared.key] = value
    return {**found, "extra": {**output.extra, **extra}}


def _alternatives(tokenizer: Any, known: TokenInfo) -> list[Alternative] | None:
    top, cut = known.get("top"), known.get("top_cut")
    if not top:
        return None
    removed = cut if cut is not None and len(cut) == len(top) else [None] * len(top)
    return [{"id": int(i), "text": tokenizer.decode([i]), "p": round(p, 5), "p_model": round(q, 5), "removed_by": r,
             "logprob": log_probability(p), "logprob_model": log_probability(q)}
            for (i, p, q), r in zip(top, removed, strict=True)]


def log_probability(p: float | None) -> float | None:
    """ln p of the backend's unrounded p (a tail token's log would not survive p's 5 places); None: unknown or 0."""
    if p is None or not p > 0:
        return None
    return round(math.log(float(p)), 6)


def build_result(spec: RunSpec, loaded: LoadedModel, prompt_tokens: int, output: GenerationOutput,
                 end: float, load_s: float, peak_rss: int | None, weight_bytes: int = 0,
                 quality: Quality = NO_QUALITY) -> Result:
    """The Result of one run: texts decoded, metrics summarized, the spec normalized."""
    tokenizer = loaded.tokenizer
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in output.sequences]
    timing = arrivals(output.token_times)
    spec_dict = spec.to_dict()
    spec_dict["chat"] = loaded.instruct if spec.chat is None else spec.chat
    return {
        "spec": spec_dict,
        "text": texts[0] if texts else "",
        "sequences": texts,
        "prompt_tokens": int(prompt_tokens),
        "new_tokens": len(output.sequences[0]) if output.sequences else 0,
        "token_ids": list(output.sequences[0]) if output.sequences else [],
        "sequence_tokens": [len(ids) for ids in output.sequences],
        "metrics": build_metrics(output, end, load_s, peak_rss, weight_bytes, quality),
        "versions": versions(),
        "device": device.current().label,
        "tokens": token_records(tokenizer, output, spec.strategy),
        "timeline": {"token_ms": [round(ms, 3) for ms in timing.ms_per_token], "token_steps": timing.ends,
                     "kv_cache_bytes": output.kv_trace},
        "scores": output.scores,
        "forward_passes": output.forward_passes,
        "stopped": output.stopped,
        "attention_layers": attention_layers(loaded.model),
        **strategy_run_records(tokenizer, output, spec.strategy),  # type: ignore[typeddict-item]
        "prefix": prefix_record(tokenizer, spec.prefix_ids),
        "constraint": constraint_record(spec, tokenizer, output),
    }


def prefix_record(tokenizer: Any, ids: tuple[int, ...]) -> PrefixRecord | None:
    """What was forced, as text; None when the run was not branched."""
    if not ids:
        return None
    return {"ids": list(ids), "text": tokenizer.decode(list(ids), skip_special_tokens=True),
            "pieces": [tokenizer.decode([i]) for i in ids]}


def attention_layers(model: Any) -> AttentionLayers:
    """Each layer's attention type and the model's own window, as transformers' caches read them from the config."""
    from transformers.cache_utils import get_layer_types_and_kwargs  # the runner has loaded transformers already

    types, per_layer = get_layer_types_and_kwargs(model.config.get_text_config(decoder=True))
    windows = [kwargs.get("sliding_window") for kind, kwargs in zip(types, per_layer, strict=True)
               if kind == "sliding_attention"]
    return {"layer_types": list(types), "sliding_window": int(windows[0]) if windows and windows[0] else None}


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 5)

"""`python -m playground context`: what each cache costs and loses as the context grows, on a long real text.

speed (speed.py): per context length, prefill and decode speed, KV bytes, peak RSS and the decode roofline.
quality (quality.py): teacher-forced over the text's first N tokens through the cache, against the full
cache on the same backend: perplexity, KL(full || cache) and top-1 agreement, overall and per bucket of positions.
This module holds what answers before anything loads (the options, the refusals) and the table; the measurements
import torch and JAX when they run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from playground import registry
from playground.data.text_files import DEFAULT_TEXT
from playground.generation_slot import Holder
from playground.spec import RunSpec

if TYPE_CHECKING:
    from playground.context.quality import References
from playground.context.request import (
    DECODE_TOKENS,
    DEFAULT_BUCKETS,
    DEFAULT_LENGTHS,
    DEFAULT_TOKENS,
    MEASURES,
    ContextRequest,
    check_context,
    model_context,
    never,
    parse_request,
)


def add_arguments(command: argparse.ArgumentParser) -> None:
    """The command's own options (the spec keys' flags are added by the CLI, as `run` has them)."""
    command.add_argument("--text-file", default=None, metavar="FILE",
                         help="a long UTF-8 text (default: the shipped Hamlet, public domain)")
    command.add_argument("--measure", default=",".join(MEASURES), help="speed, quality or both (default: both)")
    command.add_argument("--lengths", default=DEFAULT_LENGTHS,
                         help=f"speed: context lengths in tokens (default {DEFAULT_LENGTHS}); each decodes "
                              f"{DECODE_TOKENS} tokens after it")
    command.add_argument("--tokens", type=int, default=DEFAULT_TOKENS,
                         help=f"quality: tokens of the text teacher-forced (default {DEFAULT_TOKENS})")
    command.add_argument("--buckets", type=int, default=DEFAULT_BUCKETS,
                         help=f"quality: buckets of positions reported (default {DEFAULT_BUCKETS})")
    command.add_argument("--json", action="store_true", help="print one JSON object")


def request_from_args(args: argparse.Namespace) -> ContextRequest:
    return parse_request(args.measure, args.lengths, args.tokens, args.buckets)


def run_context(spec: RunSpec, request: ContextRequest, text_file: str | None,
                progress: Callable[[str], Any]) -> dict[str, Any]:
    """Refuse what can be refused before loading (the model's context from its config on disk, the text file),
    then load the model and measure; the command's JSON object."""
    from playground.data.text_files import read_text_file

    check_before_loading(spec, request)
    source = str(text_file or DEFAULT_TEXT)
    return measure_text(spec, request, read_text_file(source, "--text-file"), source, progress,
                        where=f"--text-file {source!r}")


def check_before_loading(spec: RunSpec, request: ContextRequest) -> None:
    """What the configs on disk refuse: the backend's preflight, lengths past the model's context, a window the
    text measured would never fill."""
    from playground import runner
    from playground.context.text import check_window
    from playground.models.catalog import saved_config

    runner.preflight(spec)
    check_context(request, spec.model, model_context(saved_config(spec.model)))
    check_window(request, spec)


def measure_text(spec: RunSpec, request: ContextRequest, text: str, source: str, progress: Callable[[str], Any],
                 should_stop: Callable[[], bool] = never, where: str = "the text",
                 references: References | None = None, holder: Holder | None = None) -> dict[str, Any]:
    """Load the model and measure `text` (`source` names it in the JSON, `where` in a refusal) under the one
    generation slot, a piece at a time (a run, a chunk of positions), so that no run of the page or the API overlaps
    it and none waits for more than a piece; `holder` names the measurement to those who wait (long work, held a
    piece at a time). Raises MeasureStopped once `should_stop` says so (checked between tokens and between chunks).
    `references` keeps the full cache's rows across calls that measure several caches of one text (see
    quality.py)."""
    from playground import runner
    from playground.context.text import text_ids
    from playground.models.loaded import LOADED

    progress(f"loading {spec.model}")
    loaded, _ = LOADED.get(spec.model, runner.backend_for(spec.backend).source_weights(spec))
    check_context(request, spec.model, model_context(loaded.model.config.get_text_config(decoder=True).to_dict()))
    ids, text_tokens = text_ids(loaded, text, request, spec, where)
    result: dict[str, Any] = {"model": spec.model, "backend": spec.backend, "cache": spec.cache,
                              "cache_knobs": {name: getattr(spec, name) for name in
                                              registry.cache_type(spec.cache).knobs},
                              "text": {"file": source, "tokens": text_tokens}}
    holder = holder or Holder("a context measure", yields=True)
    if "speed" in request.measures:
        from playground.context.speed import measure_speed

        rows, basis = measure_speed(loaded, spec, ids, list(request.lengths), progress, should_stop, holder)
        result.update(basis)
        result["speed"] = rows
    if "quality" in request.measures:
        from playground.context.quality import measure_quality

        result["quality"] = measure_quality(loaded, spec, ids[:request.tokens], progress, request.buckets,
                                            should_stop=should_stop, references=references, holder=holder)
    return result


def format_table(result: dict[str, Any]) -> str:
    """The result as human lines."""
    knobs = ", ".join(f"{k}={v}" for k, v in result["cache_knobs"].items())
    lines = [f"{result['model']} on {result['backend']}, {result['cache']} cache{f' ({knobs})' if knobs else ''}; "
             f"text {result['text']['file']} ({result['text']['tokens']} tokens)"]
    if "speed" in result:
        lines += ["", *_speed_lines(result)]
    if "quality" in result:
        lines += ["", *_quality_lines(result["quality"])]
    return "\n".join(lines)


def _speed_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"read bandwidth {result['bandwidth_gbs']} GB/s, weights {result['weight_bytes'] / 1e6:.0f} MB",
             f"{'context':>8}{'prefill s':>11}{'prefill tok/s':>15}{'decode tok/s':>14}{'roofline':>10}"
             f"{'% roof':>8}{'KV MB':>9}{'peak RSS MB':>13}"]
    for row in result["speed"]:
        decode, roofline = row["decode_tokens_per_s"] or 0.0, row["roofline_tokens_per_s"]
        lines.append(f"{row['context_tokens']:>8}{row['prefill_s']:>11.3f}{row['prefill_tokens_per_s'] or 0:>15.1f}"
                     f"{decode:>14.1f}{roofline:>10.1f}{decode / roofline:>8.0%}"
                     f"{row['kv_bytes'] / 1e6:>9.1f}{row['peak_rss_bytes'] / 1e6:>13.0f}")
    return lines


def _quality_lines(quality: dict[str, Any]) -> list[str]:
    lines = [f"quality over {quality['tokens']} tokens, against the full (dynamic) cache: ppl {quality['ppl']}, "
             f"KL {quality['kl_vs_full']:.3g}, top-1 {quality['top1_vs_full']:.1%}",
             f"{'positions':>15}{'ppl':>10}{'KL':>12}{'top-1':>8}"]
    for row in quality["buckets"]:
        span = f"{row['start']}-{row['end'] - 1}"
        lines.append(f"{span:>15}{row['ppl']:>10.3f}{row['kl_vs_full']:>12.3g}{row['top1_vs_full']:>8.1%}")
    return lines

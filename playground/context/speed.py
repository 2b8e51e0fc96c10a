"""What a cache costs as the context grows: prefill and decode speed, KV bytes and peak RSS at each length, and the
decode roofline at that length.

At each length L the first L tokens of the text are the prompt, and the backend generates DECODE_TOKENS greedy
tokens after it through the run's own path (the runner's backend, its cache, its timing). Each length runs once
untimed first (the JAX path compiles its programs for that length then; PyTorch warms its allocator), then once
timed. A decode step reads every weight and the cache's keys and values, so the ceiling at L is the measured read
bandwidth divided by (weight bytes + the cache's bytes at the end of the run): a cache that stays bounded keeps
its ceiling flat. The bandwidth is sampled before and after the lengths (metrics.BandwidthProbe, its median), and
its 1 GiB array is let go in between so that it stays out of the peak RSS.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from playground.backends.base import GenerationOutput
from playground.context.request import DECODE_TOKENS, MeasureStopped, never
from playground.generation_slot import Holder
from playground.metrics import BandwidthProbe, PeakRss, rates
from playground.models.loaded import LoadedModel
from playground.runner import GENERATION_LOCK, backend_for, check_cache_fits
from playground.spec import RunSpec


def decode_spec(spec: RunSpec) -> RunSpec:
    """The run timed at each length: greedy, exactly DECODE_TOKENS new tokens (an early EOS cannot shorten it)."""
    return spec.replace(strategy="greedy", max_new_tokens=DECODE_TOKENS, min_new_tokens=DECODE_TOKENS)


def sample_bandwidth() -> list[float]:
    """Three bandwidth samples (GB/s), the probe's 1 GiB array freed again before returning."""
    probe = BandwidthProbe()
    try:
        return [probe.sample() for _ in range(3)]
    finally:
        probe.close()


def _generate(loaded: LoadedModel, spec: RunSpec, prompt: list[int], should_stop: Callable[[], bool]
              ) -> GenerationOutput:
    """One run, inside the piece of the generation slot its caller holds."""
    out = backend_for(spec.backend).generate(loaded, prompt, spec, lambda ids: None, should_stop)
    if out.stopped:
        raise MeasureStopped(f"stopped at {len(prompt)} tokens of context")
    return out


def measure_length(loaded: LoadedModel, spec: RunSpec, ids: list[int], length: int,
                   progress: Callable[[str], Any], should_stop: Callable[[], bool] = never,
                   holder: Holder | None = None) -> tuple[dict[str, Any], GenerationOutput]:
    """One length's figures (bandwidth-free: the roofline is added once the bandwidth is known) and its run. Each
    of its two runs holds the generation slot as a piece of `holder`'s work: a short request may go between them."""
    holder = holder or Holder("a context measure", yields=True)
    run = decode_spec(spec)
    prompt = ids[:length]
    check_cache_fits(loaded, run, length)  # refused up front where the cache would not fit the memory budget
    progress(f"speed: {length} tokens of context, untimed run (compiles on JAX)")
    with GENERATION_LOCK.hold(holder, progress):
        _generate(loaded, run, prompt, should_stop)
    progress(f"speed: {length} tokens of context, timed run")
    with GENERATION_LOCK.hold(holder, progress), PeakRss() as rss:
        out = _generate(loaded, run, prompt, should_stop)
    decode, prefill_s = rates(out.start_time, out.token_times)
    assert prefill_s is not None  # min_new_tokens: the run produced its tokens
    row = {"context_tokens": length, "prefill_s": round(prefill_s, 4),
           "prefill_tokens_per_s": round(length / prefill_s, 2) if prefill_s > 0 else None,
           "decode_tokens_per_s": round(decode, 2) if decode else None, "kv_bytes": out.kv_cache_bytes,
           "peak_rss_bytes": rss.peak}
    return row, out


def measure_speed(loaded: LoadedModel, spec: RunSpec, ids: list[int], lengths: list[int],
                  progress: Callable[[str], Any], should_stop: Callable[[], bool] = never,
                  holder: Holder | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The speed rows, one per length, and the figures their rooflines rest on (bandwidth, weight bytes). Each
    bandwidth probe and each run holds the generation slot as a piece of `holder`'s work."""
    holder = holder or Holder("a context measure", yields=True)
    progress("speed: measuring read bandwidth (jitted sums over 1 GiB)")
    with GENERATION_LOCK.hold(holder, progress):
        samples = sample_bandwidth()
    measured = [measure_length(loaded, spec, ids, length, progress, should_stop, holder) for length in lengths]
    with GENERATION_LOCK.hold(holder, progress):
        samples += sample_bandwidth()
    bandwidth = statistics.median(samples)
    weight_bytes = next((out.weight_bytes for _, out in measured if out.weight_bytes), None) or loaded.weight_bytes
    rows = [{**row, "roofline_tokens_per_s": round(bandwidth * 1e9 / (weight_bytes + row["kv_bytes"]), 2)}
            for row, _ in measured]
    return rows, {"bandwidth_gbs": round(bandwidth, 2), "weight_bytes": weight_bytes}

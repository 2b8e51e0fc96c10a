"""Per-token latency and throughput arithmetic, including the chunked emissions of the JAX path."""

import time

import pytest

from playground.backends.base import GenerationOutput
from playground.metrics import PeakRss, per_token_latencies, percentile
from playground.result import build_metrics


def test_single_token_emissions_give_plain_differences():
    assert per_token_latencies([1.0, 1.5, 2.0, 3.0]) == [0.5, 0.5, 1.0]


def test_chunked_tokens_share_their_chunk_interval():
    # first chunk (prefill) at t=1, then 4 tokens at t=1.4 and 2 at t=1.6
    assert per_token_latencies([1.0, 1.4, 1.4, 1.4, 1.4, 1.6, 1.6]) == pytest.approx([0.1] * 6)


def test_percentile_interpolates():
    assert percentile([], 50) is None
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == pytest.approx(9.1)


def test_summary_uses_decode_rate_and_reports_ttft():
    out = GenerationOutput(sequences=[[1, 2, 3, 4, 5]], start_time=10.0,
                           token_times=[10.5, 10.6, 10.7, 10.8, 10.9], kv_cache_bytes=123)
    m = build_metrics(out, end_time=11.0, load_s=2.0, peak_rss=None)
    assert m["ttft_s"] == 0.5
    assert m["tokens_per_s"] == pytest.approx(10.0)
    assert m["ms_per_token_p50"] == pytest.approx(100.0)
    assert m["total_s"] == 1.0 and m["kv_cache_bytes"] == 123 and m["load_s"] == 2.0


def test_beam_without_token_times_reports_whole_run_rate():
    out = GenerationOutput(sequences=[[1, 2, 3, 4]], start_time=0.0, token_times=[], kv_cache_bytes=0)
    m = build_metrics(out, end_time=2.0, load_s=0.0, peak_rss=None)
    assert m["ttft_s"] is None and m["ms_per_token_p50"] is None
    assert m["tokens_per_s"] == 2.0


def test_peak_rss_sees_a_short_allocation():
    with PeakRss(interval_s=0.001) as rss:
        before = rss.peak
        block = bytearray(200 * 2**20)
        block[::4096] = b"x" * len(block[::4096])  # touch every page so it is resident
        # let the sampler thread run while the block is alive; on a machine shared with other work it may not
        # be scheduled for a while, so wait for its sample (up to 5 s) rather than for a fixed time
        deadline = time.monotonic() + 5
        while rss.peak < before + 150 * 2**20 and time.monotonic() < deadline:
            time.sleep(0.01)
        del block
    assert rss.peak >= before + 150 * 2**20

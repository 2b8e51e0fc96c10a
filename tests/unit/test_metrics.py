"""Latency and throughput arithmetic (including the chunked arrivals of the JAX path), repeated runs, peak RSS."""

import mmap
import time

import pytest

from playground.backends.base import GenerationOutput
from playground.metrics import PeakRss, arrivals, percentile
from playground.result import build_metrics, combine_runs


def test_single_token_arrivals_give_plain_differences():
    timing = arrivals([1.0, 1.5, 2.0, 3.0])
    assert timing.ms_per_token == pytest.approx([500.0, 500.0, 1000.0]) and timing.ends == [2, 3, 4]
    assert timing.tokens == 3 and timing.seconds == 2.0


def test_chunks_are_one_arrival_each_never_split_into_invented_per_token_times():
    # the prefill's token at t=1, then 4 tokens at t=1.4 and 2 at t=1.6
    timing = arrivals([1.0, 1.4, 1.4, 1.4, 1.4, 1.6, 1.6])
    assert timing.ms_per_token == pytest.approx([100.0, 100.0]) and timing.ends == [5, 7]
    assert timing.tokens == 6 and timing.seconds == pytest.approx(0.6)


def test_percentile_interpolates():
    assert percentile([], 50) is None
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == pytest.approx(9.1)


def test_summary_uses_decode_rate_and_reports_ttft():
    out = GenerationOutput(sequences=[[1, 2, 3, 4, 5]], start_time=10.0,
                           token_times=[10.5, 10.6, 10.7, 10.8, 10.9], kv_cache_bytes=123)
    m = build_metrics(out, end_time=11.0, load_s=2.0, peak_rss=None, weight_bytes=1000)
    assert m["ttft_s"] == 0.5 and m["weight_bytes"] == 1000
    assert m["tokens_per_s"] == pytest.approx(10.0)
    assert m["ms_per_token_p50"] == pytest.approx(100.0)
    assert m["total_s"] == 1.0 and m["kv_cache_bytes"] == 123 and m["load_s"] == 2.0


def test_beam_without_token_times_reports_whole_run_rate():
    out = GenerationOutput(sequences=[[1, 2, 3, 4]], start_time=0.0, token_times=[], kv_cache_bytes=0)
    m = build_metrics(out, end_time=2.0, load_s=0.0, peak_rss=None)
    assert m["ttft_s"] is None and m["ms_per_token_p50"] is None
    assert m["tokens_per_s"] == 2.0
    compiled = GenerationOutput(sequences=[[1, 2, 3, 4]], start_time=0.0, token_times=[], kv_cache_bytes=0,
                                compile_s=1.5)
    assert build_metrics(compiled, end_time=2.0, load_s=0.0, peak_rss=None)["tokens_per_s"] == 8.0  # 4 in 0.5 s


def test_peak_rss_sees_an_allocation_freed_before_the_end():
    with PeakRss(interval_s=0.001) as rss:
        before = rss.peak
        # Fresh anonymous pages: a bytearray could reuse heap the suite freed earlier and is still resident.
        block = mmap.mmap(-1, 200 * 2**20)
        for page in range(0, len(block), mmap.PAGESIZE):
            block[page] = 1  # touch every page so it is resident
        deadline = time.monotonic() + 10  # a loaded machine may not schedule the sampler for a while
        while rss.peak < before + 150 * 2**20 and time.monotonic() < deadline:
            time.sleep(0.01)
        block.close()
    assert rss.peak >= before + 150 * 2**20
    assert rss.rss() < rss.peak  # freed, yet the peak remembers it


def test_ttft_leaves_compile_out_and_compile_has_its_own_figure():
    out = GenerationOutput(sequences=[[1, 2]], start_time=0.0, token_times=[3.5, 3.6], kv_cache_bytes=0,
                           compile_s=3.0)
    m = build_metrics(out, end_time=4.0, load_s=0.0, peak_rss=None)
    assert m["ttft_s"] == 0.5 and m["compile_s"] == 3.0 and m["total_s"] == 4.0


def fake_run(rate: float, compile_s: float = 0.0) -> dict:
    times = [0.1 + compile_s + i / rate for i in range(5)]
    out = GenerationOutput(sequences=[[1, 2, 3, 4, 5]], start_time=0.0, token_times=times, kv_cache_bytes=10,
                           compile_s=compile_s)
    return {"spec": {"repeats": 1}, "text": "x", "metrics": build_metrics(out, times[-1], 0.0, 100)}


def test_repeated_runs_report_medians_and_keep_every_run():
    combined = combine_runs([fake_run(10.0, compile_s=2.0), fake_run(30.0), fake_run(20.0)])
    metrics = combined["metrics"]
    assert metrics["tokens_per_s"] == pytest.approx(20.0)
    assert metrics["tokens_per_s_runs"] == pytest.approx([10.0, 30.0, 20.0])
    assert metrics["compile_s"] == 2.0 and metrics["compile_s_runs"] == [2.0, 0.0, 0.0]  # paid once
    assert metrics["ttft_s"] == pytest.approx(0.1) and len(metrics["ttft_s_runs"]) == 3
    assert combined["spec"]["repeats"] == 3
    assert combine_runs([fake_run(10.0)])["metrics"].get("tokens_per_s_runs") is None  # one run: no runs list

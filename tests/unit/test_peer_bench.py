"""The peer benchmark's parts that need neither llama.cpp nor a model: reading llama-bench's JSON, the roofline
share, and the table's ratios against llama.cpp at the same precision."""

from __future__ import annotations

import json
import stat

from playground.tools import peer_bench

LLAMA_BENCH_JSON = [  # the fields llama-bench -o json writes that the benchmark reads
    {"n_prompt": 512, "n_gen": 0, "avg_ts": 459.0, "model_size": 538_000_000},
    {"n_prompt": 0, "n_gen": 128, "avg_ts": 48.6, "model_size": 538_000_000},
]


def test_llama_bench_output_is_read_per_test(tmp_path):
    fake = tmp_path / "llama-bench"
    fake.write_text(f"#!/bin/sh\necho '{json.dumps(LLAMA_BENCH_JSON)}'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert peer_bench.llama_bench(fake, tmp_path / "m.gguf", 2) == {"pp512": 459.0, "tg128": 48.6,
                                                                     "bytes": 538_000_000.0}


def test_the_roofline_share_is_bytes_read_per_second_over_bandwidth():
    assert peer_bench.share(50.0, 500e6, 25.0) == 1.0
    assert peer_bench.share(None, 500e6, 25.0) is None
    # a quantized engine's step reads its own head, not the fp32 embedding table beside it
    assert peer_bench.ours_bytes({"weight_bytes": 300}, "q4", 100) == 200
    assert peer_bench.ours_bytes({"weight_bytes": 300}, "fp32", 100) == 300


def test_the_table_sets_each_of_ours_beside_llama_cpp_at_its_precision():
    rows = [{"engine": "llama.cpp", "precision": "F32", "test": "tg128", "tokens_per_s": 50.0, "roofline_share": 0.9},
            {"engine": "jax", "precision": "fp32", "test": "tg128", "tokens_per_s": 40.0, "roofline_share": 0.7},
            {"engine": "llama.cpp", "precision": "Q4_1", "test": "pp512", "tokens_per_s": 200.0,
             "roofline_share": None},
            {"engine": "jax", "precision": "q4", "test": "pp512", "tokens_per_s": 300.0, "roofline_share": None}]
    assert peer_bench.ratios(rows) == ["jax fp32 / llama.cpp F32 tg128: 0.80x", "jax q4 / llama.cpp Q4_1 pp512: 1.50x"]
    table = peer_bench.format_table({"rows": rows, "cpu": "CPU", "threads": 2, "bandwidth_gbs": 30.0, "load": 1.0,
                                     "probed_bandwidth_gbs": 28.0, "rounds": 1})
    assert "jax            fp32       tg128       40.0         70%" in table


def test_no_share_passes_the_roofline_an_engine_reached():
    """The probe's read rate is a floor for the roofline: an engine that reads faster raises it to its own rate."""
    samples = {("llama.cpp", "F32", "tg128"): [(60.0, 500e6), (64.0, 500e6), (62.0, 500e6)],  # 31 GB/s
               ("jax", "fp32", "tg128"): [(40.0, 500e6)],
               ("jax", "fp32", "pp512"): [(600.0, 500e6)]}
    rows, bandwidth = peer_bench.summarize(samples, probed=27.0)
    assert bandwidth == 31.0
    by = {(r["engine"], r["test"]): r for r in rows}
    assert by["llama.cpp", "tg128"]["tokens_per_s"] == 62.0 and by["llama.cpp", "tg128"]["roofline_share"] == 1.0
    assert by["jax", "tg128"]["roofline_share"] == round(20 / 31, 3) and by["jax", "pp512"]["roofline_share"] is None
    assert peer_bench.summarize(samples, probed=40.0)[1] == 40.0  # a probe above every engine stays the roofline

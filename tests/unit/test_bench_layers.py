"""The layer-stack benchmark compares like with like: every variant computes the unrolled stack's output."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from playground.tools import bench_layers  # noqa: E402


@pytest.mark.slow  # a benchmark suite's compiles: full suite only, as the other suites' tests
def test_every_variant_gives_the_unrolled_output_and_is_timed(capsys):
    report = bench_layers.run(layers=3, hidden=16, inner=32, calls=2)
    assert set(report["variants"]) == {"unrolled", "scanned", "indexed"}
    for row in report["variants"].values():
        assert row["max_abs_diff"] < 1e-5 and row["ms_per_call"] > 0 and row["compile_s"] > 0
    assert report["weight_bytes"] == 2 * 3 * 16 * 32 * 4
    bench_layers.main(["--layers", "2", "--hidden", "8", "--inner", "16", "--calls", "1"])
    assert "scanned / unrolled time per call" in capsys.readouterr().out

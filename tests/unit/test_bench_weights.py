"""bench --suite weights on a tiny model: a row per backend and precision with its speeds, bytes and KL from fp32,
and the ratios the JAX path's int8 weights are judged by."""

import json

import pytest

pytest.importorskip("jax")

from playground.tools import bench_weights  # noqa: E402
from tests.helpers import allowed_tiny_model  # noqa: E402


@pytest.mark.slow  # three strategies' JAX programs at two precisions: full suite only
def test_the_weights_suite_reports_every_precision_with_its_kl(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_weights, "PRECISIONS", {"torch": ("fp32", "bf16"), "jax": ("fp32", "int8")})
    monkeypatch.setattr(bench_weights, "KL_STEPS", 8)
    monkeypatch.setattr(bench_weights, "KL_PROMPTS", bench_weights.KL_PROMPTS[:2])
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        result = bench_weights.run_weights_suite(path, 8, progress=lambda _: None, rounds=1)
    rows = {(r["backend"], r["weights"]): r for r in result["rows"]}
    assert list(rows) == [("torch", "fp32"), ("torch", "bf16"), ("jax", "fp32"), ("jax", "int8")]
    for row in rows.values():
        assert all(row[f"{name}_tok_s"] > 0 for name in ("greedy", "beam4", "prompt_lookup"))
    assert rows["torch", "fp32"]["kl_vs_fp32"] is None and rows["torch", "fp32"]["leaves_fp32_greedy_at"] is None
    assert 0 < rows["jax", "int8"]["kl_vs_fp32"] < 0.05 and 0 < rows["torch", "bf16"]["kl_vs_fp32"]
    assert rows["jax", "int8"]["weight_bytes"] < rows["jax", "fp32"]["weight_bytes"]
    assert result["ratios"]["jax_int8_vs_jax_fp32"] > 0 and result["ratios"]["jax_beam4_vs_torch_beam4_fp32"] > 0
    assert result["ratios"]["jax_beam4_vs_torch_beam4_int8"] is None  # torch int8 was not run here
    assert "KL nats" in bench_weights.format_table(result)
    json.dumps(result)

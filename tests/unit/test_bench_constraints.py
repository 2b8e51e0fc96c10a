"""bench --suite constraints on a tiny model (the PyTorch rows; the JAX rows say why they are refused): tokens/s per
case, the matcher's compile time and the mask's time per token apart, and the ratios to unconstrained greedy."""

import json

from playground.tools import bench_constraints
from tests.helpers import allowed_tiny_model


def test_the_constraints_suite_reports_every_case_with_its_mask_cost(tmp_path, monkeypatch):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        result = bench_constraints.run_constraint_suite(path, 12, progress=lambda _: None, rounds=1)
    rows = {(r["backend"], r["case"]): r for r in result["rows"]}
    assert list(rows) == [(b, c) for b in ("torch", "jax") for c in bench_constraints.CASES]
    for case in ("regex", "json_schema", "choice"):
        torch_row = rows["torch", case]
        assert torch_row["tokens_per_s"] > 0 and torch_row["grammar_compile_ms"] > 0
        assert torch_row["mask_ms_per_token"] > 0 and torch_row["verdict"]
        assert "PyTorch path only so far" in rows["jax", case]["refused"]
        assert result["ratios"][f"torch_{case}_vs_torch"] > 0 and result["ratios"][f"jax_{case}_vs_jax"] is None
    assert "jax_json_schema_vs_jax" in result["ratios"] and "mask stage is not built" in result["jax_missing"]
    assert "mask ms/tok" in bench_constraints.format_table(result)
    json.dumps(result)

"""bench --suite constraints on a tiny model, both backends: tokens/s per case, the matcher's compile time and the
mask's time per token apart, and the ratios to unconstrained greedy (`jax_json_schema_vs_jax` among them)."""

import json

import pytest

from playground.tools import bench_constraints
from tests.helpers import allowed_tiny_model


@pytest.mark.slow  # eight runs with JAX programs of their own: full suite only
def test_the_constraints_suite_reports_every_case_with_its_mask_cost(tmp_path, monkeypatch):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        result = bench_constraints.run_constraint_suite(path, 12, progress=lambda _: None, rounds=1)
    rows = {(r["backend"], r["case"]): r for r in result["rows"]}
    assert list(rows) == [(b, c) for b in ("torch", "jax") for c in bench_constraints.CASES]
    for backend in ("torch", "jax"):
        for case in ("regex", "json_schema", "choice"):
            row = rows[backend, case]
            assert row["tokens_per_s"] > 0 and row["grammar_compile_ms"] > 0
            assert row["mask_ms_per_token"] > 0 and row["verdict"]
            assert result["ratios"][f"{backend}_{case}_vs_{backend}"] > 0
    assert result["ratios"]["jax_json_schema_vs_jax"] > 0
    assert "mask ms/tok" in bench_constraints.format_table(result)
    json.dumps(result)

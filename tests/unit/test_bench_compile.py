"""`bench --suite compile` reports every JAX cell of the page: a first request that compiled, or a refusal."""

import pytest

from playground import registry
from playground.tools import bench_compile
from tests.helpers import allowed_tiny_model

pytest.importorskip("jax")
pytestmark = pytest.mark.slow  # twenty cells' compiles: full suite only


@pytest.mark.extended  # every JAX cell's compile; the command's own test below stays in the full suite
def test_every_cell_is_reported_with_its_compile_and_both_ttfts(monkeypatch, tmp_path):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as model:
        result = bench_compile.run_compile_suite(lambda message: None, models=(model,))
    cells = {(row["strategy"], row["cache"]) for row in result["rows"]}
    assert cells == {(s.name, c) for s in registry.strategies() if s.plugin("jax") is not None
                     for c in registry.cache_names()}
    for row in result["rows"]:
        assert "refused" not in row, row  # a tiny Llama runs every cell
        assert row["compile_s"] > 0  # its programs had been dropped: each cell compiled its own
        assert row["programs"] >= 2
        streams = registry.strategy(row["strategy"]).rows_knob is None  # a beam search streams no first token
        assert (row["ttft_warm_s"] > 0) if streams else (row["ttft_warm_s"] is None)
    table = bench_compile.format_table(result)
    assert len(table.splitlines()) == 1 + len(cells)


def test_the_command_runs_the_named_model_or_both(monkeypatch, capsys):
    """`bench --suite compile` covers both bundled models; `--model` narrows it to one."""
    from playground import __main__ as cli

    asked = []

    def suite(progress, models):
        asked.append(models)
        return {"rows": []}

    monkeypatch.setattr(bench_compile, "run_compile_suite", suite)
    cli.main(["bench", "--suite", "compile", "--json"])
    cli.main(["bench", "--suite", "compile", "--model", "gemma3-270m", "--json"])
    assert asked == [bench_compile.MODELS, ("gemma3-270m",)]

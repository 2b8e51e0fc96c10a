"""The soak's requests cover every backend, strategy, cache and bundled model with specs RunSpec accepts, and its
verdict fails on a failed request and on memory that keeps rising after the warm-up."""

import random

import pytest

from playground import registry
from playground.spec import RunSpec
from playground.tools import soak


def test_random_specs_are_valid_and_cover_every_cell_and_model():
    rng = random.Random(0)
    specs = [soak.random_spec(rng) for _ in range(400)]
    for values in specs:
        RunSpec.from_dict(values)  # would raise on an invalid one
    assert {s["backend"] for s in specs} == set(registry.backend_names())
    assert {s["strategy"] for s in specs} == set(registry.strategy_names())
    assert {s["cache"] for s in specs} == set(registry.cache_names())
    assert {s["model"] for s in specs} == set(soak.MODELS)
    assert len({s.get("window") for s in specs if "window" in s}) > 1  # knobs vary, so shapes vary
    prompts = {soak.random_prompt(rng) for _ in range(200)}
    assert max(map(len, prompts)) > 4 * min(map(len, prompts))  # prompt lengths vary too


def _report(records, samples, still_answers=True):
    return soak.report(records, samples, warmup_s=60.0, clients=2, minutes=3.0, still_answers=still_answers)


def _record(outcome, message=""):
    return soak.Record(at_s=1.0, outcome=outcome, latency_s=0.5, spec={"model": "m"}, message=message)


# every 15 s: loading, then the warm-up's second half around 2000, a compile spike, the last quarter near 2150
FLAT = [(-20.0, 500), (0.0, 1000), (15.0, 1800), (30.0, 1900), (45.0, 2000), (60.0, 2100), (75.0, 3000),
        (90.0, 2000), (105.0, 2100), (120.0, 2050), (135.0, 2150), (150.0, 2200), (165.0, 2100), (180.0, 2150)]


def test_a_flat_run_with_refusals_and_drops_passes():
    records = [_record("served"), _record("refused", "sink needs full attention"), _record("dropped")]
    result = _report(records, FLAT)
    assert result["ok"] and result["problems"] == []
    assert (result["served"], result["refused"], result["dropped"], result["failed"]) == (1, 1, 1, 0)
    # medians: 30-60 s (1900, 2000, 2100) against 150-180 s (2200, 2100, 2150); the spike is reported, not judged
    assert result["rss_at_warmup_bytes"] == 2000 and result["rss_late_bytes"] == 2150
    assert result["rss_max_after_warmup_bytes"] == 3000 and result["rss_rise"] == pytest.approx(0.075)
    assert result["refusals"] == {"sink needs full attention": 1}
    assert "1 refused, 1 dropped, 0 failed" in soak.summary(result) and soak.summary(result).endswith("ok")


def test_a_failure_or_rising_memory_or_a_silent_app_fails_the_soak():
    assert _report([_record("failed", "")], FLAT)["problems"] == ["1 failed requests"]
    rising = FLAT[:6] + [(t, 2000 + 4 * (t - 60)) for t in (90.0, 120.0, 150.0, 165.0, 180.0)]  # 2360-2480
    assert _report([_record("served")], rising)["problems"] == ["RSS rose 21% after the warm-up (limit 15%)"]
    assert _report([_record("served")], FLAT, still_answers=False)["problems"] == [
        "the app did not answer afterwards"]
    assert not _report([_record("served")], FLAT[:6])["ok"]  # nothing sampled after the warm-up: no verdict

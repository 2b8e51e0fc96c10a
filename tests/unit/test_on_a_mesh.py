"""The JAX path split over several devices gives one device's results: decoding, every cache, assisted decoding,
beam search, the guide's methods, int8 weights, and the engine's memory estimate.

The device count is fixed when JAX starts, so it runs in a fresh Python (tests/scripts/on_a_mesh.py), once for
the file; each test reads its part of that process's report. The guide's methods run in a process of their own,
in the extended lane.
"""

import os

import pytest

from tests.helpers import run_script

pytest.importorskip("jax")
pytestmark = pytest.mark.subprocess


def _mesh_reports(names: str) -> dict:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "MESH_REPORTS": names}
    return run_script("on_a_mesh", env)


@pytest.fixture(scope="module")
def report() -> dict:
    return _mesh_reports("decoder,caches,assisted,beam,int8,engine_bytes")


def test_sharded_decoding_matches_one_device(report):
    report = report["decoder"]
    for name, counts in (("llama", (2, 4)), ("gemma", (2,))):
        for n in counts:
            for strategy in ("greedy", "sampling"):
                assert report[f"{name}-{n}-{strategy}"] == report[f"{name}-1-{strategy}"], (name, n, strategy)
            assert report[f"{name}-{n}-shards"] == n  # q_proj really is split over n devices
            assert report[f"{name}-{n}-shard-rows"] == 64 // n  # 4 heads x 16 dims, split by heads


def test_sharded_decoding_matches_one_device_for_every_cache(report):
    """Every cache array split by KV heads (quantization scales with their heads); the growing cache and the
    model's own sliding layers are in the decoder's test above."""
    report = report["caches"]
    tokens = {k: v for k, v in report.items() if not k.endswith("-kv-split")}
    assert len(tokens) == 2 + 4 + 4
    assert {v for k, v in report.items() if k.endswith("-kv-split") and "-1-" not in k} == {"split"}
    for key, run in tokens.items():
        assert run == tokens[key[: key.rindex("-")] + "-1"], key


def test_sharded_main_model_gives_one_devices_tokens(report):
    """The main model split over 2 devices, the draft on one: the same tokens, greedy and sampled, and over a
    bounded cache whose verify passes write into spare ring slots."""
    report = report["assisted"]
    for name in ("lookup", "draft", "sampled", "sink"):
        assert report[f"{name}-2"] == report[f"{name}-1"]


def test_beam_search_split_over_devices_gives_one_devices_sequences_and_scores(report):
    """The beams' caches split by KV heads over 2 devices: the same sequences and scores as on one."""
    report = report["beam"]
    for cache in ("static", "sliding"):
        one, two = report[f"{cache}-1"], report[f"{cache}-2"]
        assert two["split"] == "split" and one["split"] == "one device"
        assert two["sequences"] == one["sequences"] and two["scores"] == one["scores"], cache


@pytest.mark.extended  # its own process (20 s of compiles): decoding, caches, drafts and beams split above
def test_the_guides_methods_split_over_devices_give_one_devices_results():
    """Beam sampling, diverse beam search, contrastive search, DoLa and a draft of another tokenizer with the main
    model on 2 devices: one device's sequences and scores."""
    report = _mesh_reports("guide")["guide"]
    for name in ("beam_sample", "diverse_beam", "contrastive", "dola", "universal"):
        assert report[f"{name}-2"] == report[f"{name}-1"], name


def test_two_devices_give_one_devices_tokens_with_scales_split_by_rows(report):
    report = report["int8"]
    assert report["greedy-2"] == report["greedy-1"]
    assert report["assisted-2"] == report["greedy-1"]
    assert report["q-scale-shard-rows"] * 2 == report["q-rows"]
    assert report["estimate"] == report["measured"]


def test_the_engine_estimate_on_a_mesh_counts_split_and_replicated_copies(report):
    report = report["engine_bytes"]
    for n, (estimate, measured) in report.items():
        assert estimate == measured, n
    assert report["4"][0] > report["2"][0]  # replicated weights are copied once per device

"""The context command's quality on the bundled SmolLM2 and the shipped text: StreamingLLM's finding, that a plain
window collapses once the first tokens are evicted while a few attention sinks hold the model near the full cache.
A tiny random model has no attention sinks to lose, so only a trained one can show it."""

from __future__ import annotations

import pytest

from playground.context.quality import measure_quality
from playground.context.request import ContextRequest
from playground.context.text import text_ids
from playground.data.text_files import DEFAULT_TEXT
from playground.spec import RunSpec
from tests.helpers import bundled

TOKENS, WINDOW = 512, 128


@pytest.mark.slow
def test_sinks_lose_less_than_a_plain_window_past_it():
    loaded = bundled("smollm2-135m")
    request = ContextRequest(("quality",), (), TOKENS, 4)
    found = {}
    for cache in ("sliding", "sink"):
        spec = RunSpec(model="smollm2-135m", cache=cache, window=WINDOW, sink_tokens=4)
        ids, _ = text_ids(loaded, DEFAULT_TEXT.read_text(), request, spec, str(DEFAULT_TEXT))
        found[cache] = measure_quality(loaded, spec, ids, lambda message: None, buckets=4)
    window, sinks = found["sliding"], found["sink"]
    # positions 1-128: neither has evicted anything yet
    assert window["buckets"][0]["kl_vs_full"] < 1e-4 and sinks["buckets"][0]["kl_vs_full"] < 1e-4
    for plain, sunk in zip(window["buckets"][1:], sinks["buckets"][1:], strict=True):
        assert sunk["kl_vs_full"] < plain["kl_vs_full"] / 2 and sunk["ppl"] < plain["ppl"]
    assert sinks["top1_vs_full"] > window["top1_vs_full"]

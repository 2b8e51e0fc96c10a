"""The cache strip on the page: drawn for sliding, sink and quantized columns, moved by its step slider."""

from __future__ import annotations

import re
from typing import Any

import pytest

from playground.spec import RunSpec
from playground.ui.cache_view import cache_strip_html, strip_updates
from playground.ui.wiring import build_ui


def result(cache: str, prompt: int = 10, new: int = 20, layer_types: list[str] | None = None,
           model_window: int | None = None, **spec: Any) -> dict[str, Any]:
    return {"spec": RunSpec(cache=cache, **spec).to_dict(), "prompt_tokens": prompt, "new_tokens": new,
            "attention_layers": {"layer_types": layer_types or ["full_attention"] * 4,
                                 "sliding_window": model_window}}


@pytest.fixture(scope="module")
def ui():
    return build_ui()  # (the Blocks, its Page): read, never changed, by the tests that take it


def runs(html: str, state: str) -> list[tuple[int, int]]:
    """(first, last) position of each run of `state` drawn in the strip."""
    return [(int(a), int(b)) for a, b in re.findall(rf"cache-{state}[^>]*title=\"\w+ positions (\d+)-(\d+)", html)]


def test_a_sliding_strip_shows_evictions_only_once_the_window_is_passed():
    r = result("sliding", window=8)
    assert runs(cache_strip_html(r, 1), "evicted") == [(0, 2)]  # 10 written, the last 7 kept
    assert runs(cache_strip_html(r, 1), "kept") == [(3, 9)]
    late = cache_strip_html(r, 20)  # 29 written: 0..21 evicted (split where the output starts), 22..28 kept
    assert runs(late, "evicted") == [(0, 9), (10, 21)] and runs(late, "kept") == [(22, 28)]
    assert "holds 7 of 29" in late and "step 20 of 20" in late
    assert cache_strip_html(r, 99) == late  # clamped to the run's steps


def test_sinks_and_quantized_positions_are_drawn():
    sink = cache_strip_html(result("sink", window=8, sink_tokens=2), 20)
    assert runs(sink, "sink") == [(0, 1)] and runs(sink, "kept") == [(23, 28)]
    quantized = cache_strip_html(result("quantized", cache_bits=4, residual_length=8), 12)  # 11 new written
    assert runs(quantized, "quantized") == [(0, 9), (10, 17)] and runs(quantized, "kept") == [(18, 20)]
    assert "nothing quantized yet" not in quantized


def test_a_quantized_strip_says_when_its_residual_still_holds_everything():
    """With the default residual of 128, a short run quantizes nothing: the strip says so, with the numbers."""
    short = cache_strip_html(result("quantized", backend="jax", cache_bits=2), 20)  # 29 written, residual 128
    assert "nothing quantized yet</b>: all 29 positions still in full precision (the newest 128 stay so)" in short
    assert "nothing quantized yet" not in cache_strip_html(result("sliding", window=8), 20)  # not a residual cache


def test_gemma3_gets_a_row_per_layer_type():
    gemma = result("sliding", prompt=600, new=10, layer_types=["sliding_attention"] * 5 + ["full_attention"],
                   model_window=512)
    html = cache_strip_html(gemma, 10)
    assert "5 sliding layers (window 512)" in html and "1 global layer (no window)" in html
    assert html.count("class='cache-row'") == 2


def test_a_jax_column_draws_what_its_cache_holds():
    assert cache_strip_html(result("sliding", window=8, backend="jax"), 20) == cache_strip_html(
        result("sliding", window=8), 20)  # the JAX ring keeps the PyTorch cache's tokens (their outputs are equal)
    # the JAX quantized cache keeps the newest residual_length tokens in a full-precision ring at every step
    quantized = cache_strip_html(result("quantized", cache_bits=4, residual_length=8, backend="jax"), 12)
    assert runs(quantized, "quantized") == [(0, 9), (10, 12)] and runs(quantized, "kept") == [(13, 20)]


@pytest.mark.parametrize("r", [result("dynamic"), result("static"), result("static", backend="jax"), None])
def test_no_strip_where_the_cache_keeps_everything(r):
    assert cache_strip_html(r, 1) == ""
    hidden = strip_updates("slider", "strip", r)
    assert hidden["slider"]["visible"] is False and hidden["strip"]["visible"] is False


def test_a_finished_column_gets_its_slider_at_the_last_step_and_the_slider_redraws_the_strip(ui):
    demo, page = ui
    col = page.columns[1]
    r = result("sliding", window=8)
    updates = strip_updates(col.cache_step, col.cache_strip, r)
    assert updates[col.cache_step]["maximum"] == 20 and updates[col.cache_step]["value"] == 20
    assert updates[col.cache_strip]["value"] == cache_strip_html(r, 20)
    redraw = next(fn for fn in demo.fns.values() if fn.inputs[:1] == [col.cache_step]
                  and col.cache_strip in fn.outputs)
    outcome = {"results": [None, r, None, None]}
    assert redraw.fn(5, outcome) == cache_strip_html(r, 5)


def test_the_legend_names_only_the_states_drawn():
    html = cache_strip_html(result("sliding", window=8), 20)
    assert "cache-key cache-evicted" in html and "cache-key cache-sink" not in html
    assert "cache-key cache-quantized" not in html


def assisted(backend: str) -> dict[str, Any]:
    """A prompt-lookup run over a window of 8: 20 new tokens from 14 forward passes; pass 2 drafts 5 tokens
    after new token 1 and keeps 2, pass 4 keeps all 4 of its drafts."""
    r = result("sliding", window=8, backend=backend, strategy="assisted", prompt_lookup=10)
    drafts = [(0, 0), (5, 2), (0, 0), (4, 4)] + [(0, 0)] * 10
    r["assisted_steps"] = [{"drafted": list(range(n)), "drafted_text": ["x"] * n, "accepted": a} for n, a in drafts]
    r["extra"] = {"verify_widths": [11]} if backend == "jax" else {}
    return r


def test_an_assisted_strip_moves_over_passes_and_draws_each_pass_drafts_in_the_ring():
    r = assisted("jax")
    html = cache_strip_html(r, 2)  # feeds new token 1 (position 10), drafts 11-15
    assert "forward pass 2 of 14" in html and "5 drafts: 2 accepted, 3 rejected" in html
    assert runs(html, "evicted") == [(0, 2)] and runs(html, "kept") == [(3, 9), (10, 10)]  # the window before it
    assert runs(html, "accepted") == [(11, 12)] and runs(html, "rejected") == [(13, 15)]
    assert "window 8 + 10 spare slots" in html and "10 spare slots past its window" in html
    assert "holds 13 of 16" in html and "cache-key cache-rejected" in html
    plain = cache_strip_html(r, 3)  # no drafts: an ordinary step, writing new token 4 (position 13)
    assert "accepted" not in plain.split("·")[0] and runs(plain, "rejected") == []
    assert runs(plain, "kept") == [(7, 9), (10, 13)]  # 14 written, the last 7 kept
    torch_html = cache_strip_html(assisted("torch"), 2)
    assert "spare" not in torch_html and "crop() then takes the rejected ones out" in torch_html
    assert runs(torch_html, "rejected") == [(13, 15)]


def test_an_assisted_column_slider_counts_passes_and_starts_at_the_last_rollback(ui):
    _, page = ui
    col = page.columns[0]
    updates = strip_updates(col.cache_step, col.cache_strip, assisted("jax"))
    slider = updates[col.cache_step]
    assert slider["maximum"] == 14 and slider["value"] == 2 and slider["label"] == "KV cache during forward pass"
    assert "forward pass 2 of 14" in updates[col.cache_strip]["value"]

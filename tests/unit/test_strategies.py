"""Strategies and cache types on the PyTorch path, on tiny random models: semantics, not just that it ran."""

import pytest
import torch

from playground.errors import PlaygroundError
from playground.models.loaded import LOADED
from playground.spec import RunSpec
from tests.helpers import allowed_tiny_model, tiny_gemma, tiny_loaded, torch_run

PROMPT = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 64, 5, 17, 42, 99, 3, 8, 9, 10]])


def generate(loaded, spec, draft=None):
    return torch_run(loaded, PROMPT, spec, draft=draft)[0]


def test_beam_returns_the_requested_sequences_sorted_by_score(tiny):
    out = generate(tiny, RunSpec(strategy="beam", num_beams=4, num_return_sequences=3, max_new_tokens=12))
    assert len(out.sequences) == 3 and len(out.scores) == 3
    assert out.scores == sorted(out.scores, reverse=True)
    assert len({tuple(s) for s in out.sequences}) == 3


@pytest.mark.parametrize("cache", ["dynamic", "static", "quantized"])
def test_beam_runs_on_every_cache_that_can_reorder(tiny, cache):
    out = generate(tiny, RunSpec(strategy="beam", num_beams=3, max_new_tokens=10, cache=cache))
    assert len(out.sequences[0]) == 10


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_quantized_cache_is_smaller_than_dynamic_at_equal_length(tiny, bits):
    spec = RunSpec(max_new_tokens=60, cache="quantized", cache_bits=bits, residual_length=16)
    quantized = generate(tiny, spec)
    dynamic = generate(tiny, RunSpec(max_new_tokens=60))
    assert len(quantized.sequences[0]) == len(dynamic.sequences[0]) == 60
    assert 0 < quantized.kv_cache_bytes < dynamic.kv_cache_bytes * (0.5 if bits < 8 else 0.3)


def test_8bit_quantized_cache_keeps_greedy_tokens_close_to_dynamic(tiny):
    quantized = generate(tiny, RunSpec(max_new_tokens=40, cache="quantized", cache_bits=8)).sequences[0]
    dynamic = generate(tiny, RunSpec(max_new_tokens=40)).sequences[0]
    agree = sum(a == b for a, b in zip(quantized, dynamic, strict=True)) / len(dynamic)
    assert agree >= 0.5  # fp8 rounding may flip near-ties of a random model; most tokens must survive


@pytest.fixture
def draft_model(tmp_path, monkeypatch):
    """A second tiny model with the same vocabulary, registered where local models may load from."""
    # seed 0: the same weights as the main tiny model, so drafts are mostly accepted
    with allowed_tiny_model(monkeypatch, tmp_path / "draft", seed=0) as path:
        yield path


def test_assisted_with_a_draft_model_equals_plain_greedy(tiny, draft_model):
    plain = generate(tiny, RunSpec(max_new_tokens=30))
    draft, _ = LOADED.get(draft_model)
    assisted = generate(tiny, RunSpec(strategy="assisted", assistant=draft_model, max_new_tokens=30), draft)
    assert assisted.sequences == plain.sequences
    assert 0.0 <= assisted.acceptance_rate <= 1.0
    assert assisted.acceptance_rate > 0.5  # the draft has the main model's weights
    assert assisted.forward_passes < 30  # fewer main passes than tokens: the point of speculation
    assert plain.forward_passes == 30
    drafts = assisted.draft_flags
    assert len(drafts) == 30 and sum(drafts) == 30 - assisted.forward_passes  # every pass adds one own token


def test_prompt_lookup_equals_plain_greedy_and_reports_acceptance(tiny):
    plain = generate(tiny, RunSpec(max_new_tokens=30))
    lookup = generate(tiny, RunSpec(strategy="assisted", prompt_lookup=4, max_new_tokens=30))
    assert lookup.sequences == plain.sequences
    assert lookup.acceptance_rate is None or 0.0 <= lookup.acceptance_rate <= 1.0
    assert lookup.forward_passes <= 30


@pytest.mark.parametrize(("spec", "fragment"), [
    ({"strategy": "assisted"}, "needs exactly one source of draft tokens"),
    ({"strategy": "assisted", "assistant": "x", "prompt_lookup": 3}, "needs exactly one source"),
    ({"prompt_lookup": 3}, "needs strategy 'assisted'"),
    ({"cache": "quantized", "cache_bits": 3}, "cache_bits 3 is not one of: 2, 4, 8"),
])
def test_impossible_combinations_are_refused_up_front(spec, fragment):
    with pytest.raises(PlaygroundError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        RunSpec.from_dict(spec)


def test_quantized_cache_on_a_model_with_sliding_layers_quantizes_the_global_ones():
    gemma = tiny_loaded(model=tiny_gemma())
    quantized = generate(gemma, RunSpec(max_new_tokens=40, cache="quantized", cache_bits=4, residual_length=8))
    dynamic = generate(gemma, RunSpec(max_new_tokens=40))
    assert len(quantized.sequences[0]) == 40
    assert quantized.kv_cache_bytes < dynamic.kv_cache_bytes
    # once the window is full only the one global layer grows: (k, v) x 2 kv heads x 16 dims x 4 bytes a token
    assert dynamic.kv_trace[-1] - dynamic.kv_trace[-2] == 2 * 2 * 16 * 4


@pytest.mark.parametrize(("cache", "extra"), [("sliding", {"window": 12}), ("sink", {"window": 12, "sink_tokens": 4})])
def test_sliding_and_sink_caches_stay_flat_once_full(tiny, cache, extra):
    out = generate(tiny, RunSpec(max_new_tokens=60, cache=cache, **extra))  # 16 + 60 tokens, 6x the window
    assert len(out.sequences[0]) == 60
    full = out.kv_trace[-40:]
    assert len(set(full)) == 1 and out.kv_cache_bytes == full[-1]
    dynamic = generate(tiny, RunSpec(max_new_tokens=60))
    assert out.kv_cache_bytes < dynamic.kv_cache_bytes / 3


def test_assisted_decoding_over_a_sliding_window_equals_plain_greedy_over_it(tiny):
    plain = generate(tiny, RunSpec(max_new_tokens=30, cache="sliding", window=8))
    lookup = generate(tiny, RunSpec(max_new_tokens=30, cache="sliding", window=8, strategy="assisted",
                                    prompt_lookup=3))
    assert lookup.sequences == plain.sequences


def test_the_four_named_strategies_run_on_every_cache_on_both_backends():
    """The compatibility table says yes in all 40 cells of greedy, sampling, beam and assisted decoding; what is
    left to refuse depends on the model (the guide's methods added since: tests/unit/test_guide_strategies.py)."""
    from playground import compatibility, registry

    named = ("greedy", "sampling", "beam", "assisted")
    assert set(named) <= set(registry.strategy_names())
    cells = [(b, s, c) for b in registry.backend_names() for s in named for c in registry.cache_names()]
    assert len(cells) == 40 and all(compatibility.refusal(*cell) is None for cell in cells)


ROLLBACK_CACHES = {
    "static": {"cache": "static"},
    "sink": {"cache": "sink", "window": 12, "sink_tokens": 4},
    "fp8": {"cache": "quantized", "cache_bits": 8},
    "quanto-4": {"cache": "quantized", "cache_bits": 4, "residual_length": 8},
    "quanto-2": {"cache": "quantized", "cache_bits": 2, "residual_length": 4},
}


# the sink cache needs an all-global RoPE model: refused on Gemma3's layout (tested below)
@pytest.mark.parametrize(("model", "cache"), [(model, cache) for model in ("llama", "gemma3") for cache in
                                              ROLLBACK_CACHES if (model, cache) != ("gemma3", "sink")])
def test_assisted_decoding_rolls_every_cache_back_to_plain_greedys_tokens(tiny, model, cache):
    """60 tokens: the quantized caches flush their residual many times, the sink window (12) and Gemma3's (8)
    are crossed many times."""
    loaded = tiny if model == "llama" else tiny_loaded(model=tiny_gemma())
    plain = generate(loaded, RunSpec(max_new_tokens=60, **ROLLBACK_CACHES[cache]))
    lookup = generate(loaded, RunSpec(max_new_tokens=60, strategy="assisted", prompt_lookup=6,
                                      **ROLLBACK_CACHES[cache]))
    assert lookup.sequences == plain.sequences
    assert lookup.acceptance_rate is not None and 0 < lookup.acceptance_rate < 1  # rejected drafts rolled back
    assert lookup.forward_passes < 60


@pytest.mark.parametrize("cache", ["static", "sink", "quanto-4"])
def test_a_draft_model_over_a_static_or_quantized_cache_gives_plain_greedys_tokens(tiny, draft_model, cache):
    plain = generate(tiny, RunSpec(max_new_tokens=40, **ROLLBACK_CACHES[cache]))
    draft, _ = LOADED.get(draft_model)
    assisted = generate(tiny, RunSpec(strategy="assisted", assistant=draft_model, max_new_tokens=40,
                                      **ROLLBACK_CACHES[cache]), draft)
    assert assisted.sequences == plain.sequences and assisted.forward_passes < 40


def test_a_quantized_cache_caps_drafts_where_plain_decoding_would_quantize(tiny):
    """Residual 4: no pass may carry a draft past the next flush, and the prompt's pass carries none."""
    spec = RunSpec(max_new_tokens=40, strategy="assisted", prompt_lookup=6, cache="quantized", cache_bits=4,
                   residual_length=4)
    steps = generate(tiny, spec).assisted_steps
    assert steps[0]["drafted"] == []
    assert max(len(step["drafted"]) for step in steps) <= 3
    assert any(step["drafted"] for step in steps)


def test_sink_cache_on_a_model_with_native_sliding_layers_is_refused_with_the_alternative():
    with pytest.raises(PlaygroundError, match="use cache 'sliding'"):
        generate(tiny_loaded(model=tiny_gemma()), RunSpec(cache="sink", window=12))


@pytest.mark.parametrize("length_penalty", [1.0, 0.5])
def test_beam_tree_records_what_beam_search_weighed_and_marks_the_returned_path(tiny, length_penalty):
    spec = RunSpec(strategy="beam", num_beams=3, num_return_sequences=2, max_new_tokens=8,
                   length_penalty=length_penalty)
    out = generate(tiny, spec)
    tree = out.beam_tree
    assert len(tree) == 8 and all(len(step) == 6 for step in tree)  # 2 x num_beams candidates per step
    assert all(sum(n["kept"] for n in step) <= 3 for step in tree)
    for before, step in zip(tree, tree[1:], strict=False):  # every candidate extends a beam kept the step before
        assert all(n["parent"] is not None and before[n["parent"]]["kept"] for n in step)
    path = [next(n for n in step if n["chosen"]) for step in tree]
    assert [n["token"] for n in path] == out.sequences[0]
    assert path[-1]["score"] / len(path) ** length_penalty == pytest.approx(out.scores[0], abs=1e-4)
    assert all(a["score"] >= b["score"] for step in tree for a, b in zip(step, step[1:], strict=False))

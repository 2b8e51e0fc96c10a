"""The logits chain as one thing: knobs whose records every list derives from, an order that changes what the math
says it changes on both backends, draws that follow the distribution the chain leaves, and new values that
compile nothing on JAX."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from playground import registry  # noqa: E402
from playground.backends.jax.chain import token_choice  # noqa: E402
from playground.backends.jax.chain.chain import Context, History, pushed, start_history  # noqa: E402
from playground.backends.torch.chain import TorchContext, processors  # noqa: E402
from playground.errors import PlaygroundError  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import fast_lane_keeps, jax_run, tiny_llama, tiny_loaded  # noqa: E402

VOCAB = 40
HISTORY = np.array([[3, 5, 7, 3, 5, 7, 3, 5]], np.int32)  # a text that repeats itself: penalties have work to do
ROW = np.linspace(4.0, -4.0, VOCAB).astype(np.float32)[None, :]  # (1, V) hand-made logits, token 0 the best
EOS = (VOCAB - 1,)


PROMPT_LENGTH = 5  # HISTORY's prompt; the 3 tokens after it were generated


def jax_history(mode: token_choice.SamplingMode) -> History:
    prompt = jnp.asarray(HISTORY[:, :PROMPT_LENGTH])
    history = start_history(prompt, jnp.int32(PROMPT_LENGTH), mode.needs, VOCAB)
    return pushed(history, jnp.asarray(HISTORY[:, PROMPT_LENGTH:]), mode.needs)


def jax_final(spec: RunSpec, key: jax.Array | None = None) -> np.ndarray:
    """The distribution (V,) a JAX step draws the next token from, after HISTORY."""
    mode, knobs = token_choice.mode_for(spec, Context(VOCAB, EOS, None), samples=True, history=64)
    history = jax_history(mode)
    chain_key = key if mode.chain.random else None
    out = token_choice.processed(jnp.asarray(ROW), history, jnp.int32(3), chain_key, mode, jax.device_put(knobs))
    return np.asarray(out.final[0])


def torch_final(spec: RunSpec) -> np.ndarray:
    """The same distribution from the PyTorch chain (prompt: the first 5 ids, so 3 tokens were generated)."""
    scores = torch.tensor(ROW)
    ids = torch.tensor(HISTORY, dtype=torch.long)
    for _, processor in processors(spec, TorchContext(PROMPT_LENGTH, EOS, None, torch.device("cpu"))):
        scores = processor(ids, scores)
    return torch.softmax(scores, dim=-1)[0].numpy()


def kept(final: np.ndarray) -> set[int]:
    return {int(i) for i in np.nonzero(final > 0)[0]}


# -- knobs as data --------------------------------------------------------------------------------------------------

def test_runspec_fields_are_their_knobs_records():
    """A RunSpec field that is a knob has the knob's type and default, and every built-in knob is a field."""
    fields = {f.name: f for f in dataclasses.fields(RunSpec)}
    for knob in registry.knobs():
        assert knob.name in fields, f"knob {knob.name} is not a RunSpec field"
        assert getattr(RunSpec(), knob.name) == knob.default, knob.name
        assert fields[knob.name].type.split(" |")[0] == knob.kind.__name__, knob.name


def test_every_knob_is_a_cli_flag_with_its_type():
    from playground.__main__ import build_parser

    parser = build_parser()
    for knob in registry.knobs():
        if knob.kind in (int, float) and knob.low is not None:
            args = parser.parse_args(["run", "--prompt", "x", "--" + knob.name.replace("_", "-"), str(knob.default)])
            assert getattr(args, knob.name) == knob.default


def test_chain_widgets_span_their_knobs_range_and_no_widget_leaves_it():
    from playground.ui.wiring import build_ui

    _, page = build_ui()
    widgets = page.columns[0].knobs
    for knob in registry.knobs():
        widget = widgets.get(knob.name)
        if widget is None or knob.low is None or getattr(widget, "maximum", None) is None:
            continue
        assert widget.minimum >= knob.low and widget.maximum <= (knob.high if knob.high is not None else np.inf)
        if knob.group:  # drawn from the record alone: the whole range
            assert widget.maximum == knob.high and widget.minimum <= knob.low + (knob.step or 0)


def test_a_knob_out_of_range_is_refused_with_its_range():
    with pytest.raises(PlaygroundError, match=r"temperature=9.0 is out of range; allowed: \(0.0, 5.0\]"):
        RunSpec(temperature=9.0)
    with pytest.raises(PlaygroundError, match="sampler_order names 'top_q'"):
        RunSpec(sampler_order="top_k,top_q")
    with pytest.raises(PlaygroundError, match="names temperature more than once"):
        RunSpec(sampler_order="temperature,temperature")
    with pytest.raises(PlaygroundError, match="dry_sequence_breakers must be a JSON list"):
        RunSpec(dry_sequence_breakers="newline")


# -- the order --------------------------------------------------------------------------------------------------

def test_changing_the_order_changes_the_kept_set_as_the_math_says_on_both_backends():
    """min-p after temperature 0.5 sees a sharper distribution, so it keeps fewer tokens than min-p first."""
    default = RunSpec(strategy="sampling", temperature=0.5, top_k=0, min_p=0.2)
    reordered = default.replace(sampler_order="min_p,temperature")
    for final in (jax_final, torch_final):
        assert len(kept(final(default))) < len(kept(final(reordered)))
    assert kept(jax_final(default)) == kept(torch_final(default))
    assert kept(jax_final(reordered)) == kept(torch_final(reordered))


def test_the_order_rule_trades_places_among_the_named_stages_only():
    from playground.registry import chain

    names = [stage.name for stage in chain.ordered("top_p,temperature")]
    default = [stage.name for stage in chain.ordered("")]
    assert names.index("top_p") == default.index("temperature") and names.index("temperature") == default.index(
        "top_p")
    assert [n for n in names if n not in ("top_p", "temperature")] == [
        n for n in default if n not in ("top_p", "temperature")]


# -- each stage on the same row, both backends; draws follow the chain's distribution -----------------------

STAGES = {
    "top_k": {"top_k": 5},
    "top_p": {"top_k": 0, "top_p": 0.7},
    "min_p": {"top_k": 0, "min_p": 0.1},
    "typical_p": {"top_k": 0, "typical_p": 0.4},
    "epsilon_cutoff": {"top_k": 0, "epsilon_cutoff": 0.02},
    "eta_cutoff": {"top_k": 0, "eta_cutoff": 0.05},
    "top_n_sigma": {"top_k": 0, "top_n_sigma": 1.0},
    "xtc": {"top_k": 0, "xtc_threshold": 0.1, "xtc_probability": 1.0},
    "repetition_penalty": {"top_k": 0, "repetition_penalty": 1.8},
    "presence_frequency": {"top_k": 0, "presence_penalty": 1.0, "frequency_penalty": 0.5},
    "no_repeat_ngram": {"top_k": 0, "no_repeat_ngram_size": 2},
    "dry": {"top_k": 0, "dry_multiplier": 1.5, "dry_allowed_length": 1, "dry_sequence_breakers": "[]"},
    "logit_bias": {"top_k": 0, "logit_bias": '{"3": 2.5, "0": -100, "30": 4}'},
}


# the fast lane: top-k; every stage alone agrees across the backends in test_sampler_lab's fast matrix, through
# the same JAX chain and PyTorch processors
@pytest.mark.parametrize("stage", fast_lane_keeps(list(STAGES)))
def test_each_stage_changes_the_distribution_the_same_on_both_backends(stage):
    spec = RunSpec(strategy="sampling", **STAGES[stage])
    plain = RunSpec(strategy="sampling", top_k=0)
    ours, theirs = jax_final(spec, jax.random.PRNGKey(0)), torch_final(spec)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    assert np.abs(ours - jax_final(plain)).sum() > 0.01, f"{stage} did not change the distribution"


def test_logit_bias_comes_before_the_filters_unless_the_order_moves_it_after_them():
    """First, a bias lifts a token top-k would have dropped; moved after top-k, it cannot bring one back."""
    first = RunSpec(strategy="sampling", top_k=5, logit_bias='{"20": 50}')
    after = first.replace(sampler_order="top_k,logit_bias")
    for final in (jax_final, torch_final):
        assert final(first)[20] > 0.99 and final(after)[20] == 0.0
    np.testing.assert_allclose(jax_final(after), torch_final(after), atol=1e-5)


def test_typical_p_keeps_tokens_by_their_distance_to_the_entropy_not_by_rank():
    final = jax_final(RunSpec(strategy="sampling", top_k=0, typical_p=0.4))
    assert final[0] == 0.0 and kept(final)  # the most likely token is too surprising... by being too likely


def test_xtc_keeps_the_least_likely_token_above_the_threshold():
    plain = jax_final(RunSpec(strategy="sampling", top_k=0))
    above = [i for i in range(VOCAB) if plain[i] >= 0.1]
    final = jax_final(RunSpec(strategy="sampling", top_k=0, xtc_threshold=0.1, xtc_probability=1.0),
                      jax.random.PRNGKey(0))
    assert len(above) >= 2 and final[max(above)] > 0 and all(final[i] == 0 for i in above[:-1])


def test_dry_penalises_the_continuation_of_a_repeat_and_not_a_sequence_breaker():
    spec = RunSpec(strategy="sampling", top_k=0, dry_multiplier=1.0, dry_allowed_length=2,
                   dry_sequence_breakers="[]")
    plain = jax_final(RunSpec(strategy="sampling", top_k=0))
    # ... 3 5 7 3 5: "7" would extend a repeated "3 5 7" (length 2 so far): penalised; the others not
    assert jax_final(spec)[7] < plain[7] * 0.5
    assert jax_final(spec)[0] > plain[0]


# the fast lane: top-p (one draw from whatever the chain leaves; each stage's distribution is the matrix above's)
@pytest.mark.parametrize("stage", fast_lane_keeps(["top_p", "typical_p", "top_n_sigma", "xtc", "dry"]))
def test_jax_draws_follow_the_distribution_the_chain_leaves(stage):
    spec = RunSpec(strategy="sampling", temperature=1.5, **STAGES[stage])
    mode, knobs = token_choice.mode_for(spec, Context(VOCAB, EOS, None), samples=True, history=64)
    history, knobs = jax_history(mode), jax.device_put(knobs)

    def draw(key: jax.Array) -> jax.Array:
        token, _, info, _ = token_choice.select(jnp.asarray(ROW), key, jnp.int32(3), history, mode, knobs)
        return token[0]

    draws = 20_000
    tokens = jax.jit(jax.vmap(draw))(jax.random.split(jax.random.PRNGKey(1), draws))
    freq = np.bincount(np.asarray(tokens), minlength=VOCAB) / draws
    assert np.abs(freq - torch_final(spec)).max() < 0.015


def test_xtc_coin_is_seeded_and_reproducible():
    spec = RunSpec(strategy="sampling", top_k=0, xtc_threshold=0.05, xtc_probability=0.5)
    outcomes = {tuple(kept(jax_final(spec, jax.random.PRNGKey(seed)))) for seed in range(12)}
    assert len(outcomes) == 2  # the coin fell both ways
    assert all(kept(jax_final(spec, jax.random.PRNGKey(seed))) == kept(jax_final(spec, jax.random.PRNGKey(seed)))
               for seed in range(4))
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        runs.append([tuple(kept(torch_final(spec))) for _ in range(12)])
    assert runs[0] == runs[1] and len(set(runs[0])) == 2


# -- JAX: new values compile nothing ----------------------------------------------------------------------------

@pytest.mark.slow  # the fast lane: each stage traces once for any values (test_jax_samplers), and a repeat with
# other knob values compiles nothing (test_jax_decoder)
def test_new_sampler_values_compile_nothing_on_jax():
    llama = tiny_loaded("tiny-llama", tiny_llama(seed=5))
    prompt = torch.tensor([[5, 17, 42, 99, 3, 17, 42]])
    knobs = {"strategy": "sampling", "backend": "jax", "cache": "static", "max_new_tokens": 10, "top_k": 20,
             "top_p": 0.9, "min_p": 0.01, "typical_p": 0.95, "epsilon_cutoff": 0.001, "eta_cutoff": 0.001,
             "top_n_sigma": 2.0, "xtc_threshold": 0.1, "xtc_probability": 0.5, "repetition_penalty": 1.1,
             "presence_penalty": 0.2, "frequency_penalty": 0.1, "dry_multiplier": 0.5, "min_new_tokens": 4}
    first, _ = jax_run(llama, prompt, RunSpec(**knobs))
    changed = {"temperature": 0.6, "top_p": 0.8, "min_p": 0.05, "typical_p": 0.9, "epsilon_cutoff": 0.002,
               "eta_cutoff": 0.002, "top_n_sigma": 1.5, "xtc_threshold": 0.2, "xtc_probability": 0.9,
               "repetition_penalty": 1.3, "presence_penalty": -0.5, "frequency_penalty": 0.7, "dry_multiplier": 1.2,
               "dry_base": 2.0, "dry_allowed_length": 3, "dry_sequence_breakers": '["!"]', "min_new_tokens": 0,
               "seed": 9}
    second, _ = jax_run(llama, prompt, RunSpec(**{**knobs, **changed}))
    assert first.compile_s > 0 and second.compile_s == 0.0

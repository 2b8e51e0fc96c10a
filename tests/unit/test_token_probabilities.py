"""Token probabilities mean the same on both backends: `p`/`entropy` of the distribution the token was drawn from,
`p_model`/`entropy_model` of the model's own softmax, the same alternatives.

Sampled runs draw different tokens on the two backends (different random generators), so the PyTorch run is made
to draw the JAX run's tokens (torch.multinomial answers with them); every processor and filter still runs, so
each step's distributions are the ones PyTorch computes for that prefix.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground.spec import RunSpec  # noqa: E402
from tests.helpers import fast_lane_keeps, jax_run, tiny_llama, tiny_loaded, torch_run  # noqa: E402

PROMPT = torch.tensor([[5, 17, 42, 99, 3, 17, 42]])
NEW = 16
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def llama():
    return tiny_loaded("tiny-llama", tiny_llama(seed=3))


def torch_drawing(monkeypatch: pytest.MonkeyPatch, tokens: list[int]) -> None:
    """torch.multinomial answers with `tokens`, one per call, after checking each could be drawn."""
    queue = list(tokens)

    def draw(probs: torch.Tensor, num_samples: int = 1, **kwargs: object) -> torch.Tensor:
        token = queue.pop(0)
        assert probs[0, token] > 0, "PyTorch's distribution cannot draw the token JAX drew"
        return torch.tensor([[token]])

    monkeypatch.setattr(torch, "multinomial", draw)


def assert_same_records(ours: list[dict], theirs: list[dict]) -> None:
    assert len(ours) == len(theirs) == NEW
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        for key in ("p", "entropy", "p_model", "entropy_model"):
            assert a[key] == pytest.approx(b[key], abs=TOLERANCE), f"step {step}: {key}"
        assert [t[0] for t in a["top"]] == [t[0] for t in b["top"]], f"step {step}: alternatives"
        for (_, p_a, q_a), (_, p_b, q_b) in zip(a["top"], b["top"], strict=True):
            assert p_a == pytest.approx(p_b, abs=TOLERANCE) and q_a == pytest.approx(q_b, abs=TOLERANCE)
        assert a["top_cut"] == b["top_cut"], f"step {step}: what removed each alternative"
        assert [name for name, _, _ in a["stages"]] == [name for name, _, _ in b["stages"]], f"step {step}: stages"
        for (name, removed_a, moved_a), (_, removed_b, moved_b) in zip(a["stages"], b["stages"], strict=True):
            assert removed_a == removed_b, f"step {step}: tokens {name} removed"
            assert moved_a == pytest.approx(moved_b, abs=TOLERANCE), f"step {step}: mass {name} moved"


def test_greedy_records_agree_with_a_penalty_and_a_minimum_length(llama):
    knobs = {"max_new_tokens": NEW, "min_new_tokens": NEW, "repetition_penalty": 2.0}
    jax_out, _ = jax_run(llama, PROMPT, RunSpec(backend="jax", cache="static", **knobs))
    torch_out, _ = torch_run(llama, PROMPT, RunSpec(**knobs))
    assert jax_out.sequences == torch_out.sequences
    assert_same_records(jax_out.token_info, torch_out.token_info)
    # the penalty moves the drawn distribution away from the model's own
    assert any(abs(r["p"] / r["p_model"] - 1) > 0.01 for r in torch_out.token_info)


STAGES = {
    "temperature": {"temperature": 0.7, "top_k": 0},
    "top_k": {"temperature": 1.3, "top_k": 5},
    "top_p": {"top_k": 0, "top_p": 0.8},
    "min_p": {"temperature": 0.3, "top_k": 0, "min_p": 0.2},
    "typical_p": {"top_k": 0, "typical_p": 0.5},
    "epsilon_cutoff": {"top_k": 0, "epsilon_cutoff": 0.004},
    "eta_cutoff": {"top_k": 0, "eta_cutoff": 0.01},
    "top_n_sigma": {"top_k": 0, "top_n_sigma": 1.0},
    "xtc": {"top_k": 0, "temperature": 0.3, "xtc_threshold": 0.05, "xtc_probability": 1.0},
    "presence_frequency": {"top_k": 0, "presence_penalty": 1.5, "frequency_penalty": 0.8},
    "no_repeat_ngram": {"top_k": 0, "temperature": 0.2, "no_repeat_ngram_size": 2},
    "dry": {"top_k": 0, "temperature": 0.2, "dry_multiplier": 2.0, "dry_allowed_length": 1,
            "dry_sequence_breakers": '["!"]'},
    "all": {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "min_p": 0.02, "repetition_penalty": 1.2,
            "typical_p": 0.95, "top_n_sigma": 2.0, "xtc_threshold": 0.1, "xtc_probability": 1.0,
            "presence_penalty": 0.2, "dry_multiplier": 0.5},
    "reordered": {"temperature": 0.5, "top_k": 0, "min_p": 0.2, "sampler_order": "min_p,temperature"},
}


# a forced prefix is part of the prompt on both backends: it matters to the stages that read the text so far
AFTER_A_PREFIX = ("presence_frequency", "no_repeat_ngram", "dry", "all")


# the fast lane keeps every stage at once after a prefix; each stage alone agrees across the backends in
# test_sampler_lab's fast check, and its own record here in the full suite
@pytest.mark.parametrize(("stage", "prefix"), fast_lane_keeps(
    [(stage, ()) for stage in STAGES] + [(stage, (7, 7, 200)) for stage in AFTER_A_PREFIX],
    keep=len(STAGES) + AFTER_A_PREFIX.index("all")))
def test_sampled_records_agree_with_each_stage(llama, monkeypatch, stage, prefix):
    """Every step's `p` after the chain, `p_model` before it, the alternatives, what removed each, and each stage's
    removed count and moved mass agree across the backends (a forced prefix is part of the prompt there)."""
    knobs = {"strategy": "sampling", "seed": 11, "max_new_tokens": NEW, "min_new_tokens": NEW, **STAGES[stage]}
    prompt = torch.cat([PROMPT, torch.tensor([list(prefix)], dtype=PROMPT.dtype)], dim=1)
    jax_out, _ = jax_run(llama, prompt, RunSpec(backend="jax", cache="static", **knobs))
    torch_drawing(monkeypatch, jax_out.sequences[0])
    torch_out, _ = torch_run(llama, prompt, RunSpec(**knobs))
    assert torch_out.sequences == jax_out.sequences
    assert_same_records(jax_out.token_info, torch_out.token_info)
    named = {name for record in jax_out.token_info for name, _, _ in record["stages"]}
    assert stage in named or stage in ("all", "reordered")  # the stage ran, at every step


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_top_k_1_draws_with_probability_1_while_the_model_was_less_sure(llama, backend):
    run = jax_run if backend == "jax" else torch_run
    out, _ = run(llama, PROMPT, RunSpec(backend=backend, cache="static", strategy="sampling", top_k=1, temperature=0.7,
                                        max_new_tokens=NEW, min_new_tokens=NEW))
    assert all(r["p"] == pytest.approx(1.0) and r["entropy"] == pytest.approx(0.0, abs=1e-6)
               for r in out.token_info)
    assert all(r["p_model"] < 1.0 for r in out.token_info)  # a random model is never certain


# the fast lane: PyTorch's; JAX records the same filter for each alternative in the every-stage check above
@pytest.mark.parametrize("backend", fast_lane_keeps(["torch", "jax"]))
def test_each_alternative_records_the_filter_that_removed_it(llama, backend):
    """temperature 0.1, top_k=2, top_p=0.7: the third and later alternatives fall to top-k; of the two left, the
    second falls to top-p exactly when the first already holds 0.7 of their mass after temperature; EOS, held back
    by min_new_tokens, is recorded as that whenever it is among the alternatives."""
    run = jax_run if backend == "jax" else torch_run
    out, _ = run(llama, PROMPT, RunSpec(backend=backend, cache="static", strategy="sampling", temperature=0.1,
                                        top_k=2, top_p=0.7, max_new_tokens=NEW, min_new_tokens=NEW))
    outcomes = set()
    for record in out.token_info:
        (first, _, q1), (second, _, q2), *rest = record["top"]
        cuts = dict(zip([i for i, _, _ in record["top"]], record["top_cut"], strict=True))
        assert all(cuts[i] == ("min_new_tokens" if i == 256 else "top_k") for i, _, _ in rest)
        assert cuts[first] is None
        expected = "top_p" if 1 / (1 + (q2 / q1) ** 10) >= 0.7 else None
        assert cuts[second] == ("min_new_tokens" if second == 256 else expected)
        outcomes.add(cuts[second])
    assert {None, "top_p"} <= outcomes


def noisy_copy(seed: int):
    """The main model with noise on its output head: a draft that is right often, not always."""
    model = tiny_llama(seed=seed)
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head.add_(torch.randn(head.shape, generator=torch.Generator().manual_seed(1)) * head.std())
    return model


@pytest.mark.parametrize("drafts", ["prompt lookup", "draft model"])
def test_assisted_records_are_plain_greedys_on_both_backends(llama, drafts):
    """A verification pass scores every drafted position; each token keeps the record of the position that
    wrote it (a rejected draft's position included, with the main model's own token), and a draft model's
    own processing is not recorded."""
    knobs = {"max_new_tokens": NEW, "min_new_tokens": NEW}
    own = torch_run(llama, PROMPT, RunSpec(**knobs))[0].sequences[0]
    prompt = torch.tensor([PROMPT[0].tolist() + own + PROMPT[0].tolist()])  # the text to write is found in it
    plain, _ = torch_run(llama, prompt, RunSpec(**knobs))
    source = {"prompt_lookup": 4} if drafts == "prompt lookup" else {"assistant": "tiny-draft"}
    assisted = RunSpec(strategy="assisted", **source, **knobs)
    draft = tiny_loaded("tiny-llama-draft", noisy_copy(seed=3)) if drafts == "draft model" else None
    torch_out, _ = torch_run(llama, prompt, assisted, draft=draft)
    assert torch_out.sequences == plain.sequences
    steps = torch_out.assisted_steps
    assert any(s["accepted"] for s in steps) and any(s["accepted"] < len(s["drafted"]) for s in steps)
    assert_same_records(torch_out.token_info, plain.token_info)
    if draft is None:
        jax_out, _ = jax_run(llama, prompt, assisted.replace(backend="jax", cache="static"))
        assert_same_records(jax_out.token_info, plain.token_info)


# the fast lane keeps PyTorch's; JAX's verify records are checked on the static cache above, and its bounded and
# quantized caches roll drafts back in test_jax_assisted
@pytest.mark.parametrize(("backend", "cache"), fast_lane_keeps([
    ("jax", {"cache": "sink", "window": 12, "sink_tokens": 2}),
    ("jax", {"cache": "quantized", "cache_bits": 4, "residual_length": 4}),
    ("torch", {"cache": "quantized", "cache_bits": 4, "residual_length": 4}),
], keep=2))
def test_a_verify_pass_over_a_bounded_or_quantized_cache_scores_as_plain_decoding_does(llama, backend, cache):
    """7 + 16 tokens cross the 12-token window and flush the residual 4 times. Each verified position's
    distribution is the one plain decoding computes there over the same cache: what speculative sampling draws
    from (its rule is test_jax_assisted's first-token test), so it follows the main model's distribution."""
    knobs = {"backend": backend, "max_new_tokens": NEW, "min_new_tokens": NEW, **cache}
    run = jax_run if backend == "jax" else torch_run
    own = run(llama, PROMPT, RunSpec(backend=backend, max_new_tokens=NEW))[0].sequences[0]
    prompt = torch.tensor([PROMPT[0].tolist() + own + PROMPT[0].tolist()])  # 30 tokens: quanto's groups fit
    plain, _ = run(llama, prompt, RunSpec(**knobs))
    assisted, _ = run(llama, prompt, RunSpec(strategy="assisted", prompt_lookup=4, **knobs))
    assert assisted.sequences == plain.sequences
    assert any(s["accepted"] < len(s["drafted"]) for s in assisted.assisted_steps)
    assert_same_records(assisted.token_info, plain.token_info)

"""Universal assisted decoding on the JAX path (backends/jax/universal.py): a draft model with another tokenizer
proposes text; its drafts, in the main model's ids, keep plain greedy's tokens, some rejected, and seeded sampling
reproduces. Tiny models over the byte tokenizer, the draft's with one extra token."""

from __future__ import annotations

import pytest
import torch

from playground.models.loaded import LoadedModel
from playground.spec import RunSpec
from tests.helpers import PROMPT_TEXT, byte_tokenizer, jax_run, same_weights_other_tokenizer, tiny_llama, tiny_loaded

pytest.importorskip("torchax")

NEW = 24


@pytest.fixture(scope="module")
def main():
    return tiny_loaded("tiny-main", tiny_llama(0))


@pytest.fixture(scope="module")
def prompt(main):
    return torch.tensor([main.tokenizer.encode(PROMPT_TEXT)])


def _spec(**overrides) -> RunSpec:
    return RunSpec.from_dict({"backend": "jax", "strategy": "assisted", "assistant": "tiny-other",
                              "max_new_tokens": NEW, "min_new_tokens": NEW, **overrides})


def _other_tokenizer_draft(seed: int):
    """Other weights over the draft's tokenizer: its proposals are often wrong."""
    tokenizer = byte_tokenizer()
    tokenizer.add_tokens(["<extra>"])
    return LoadedModel("tiny-other-weights", "fp32", tiny_llama(seed, vocab_size=len(tokenizer)), tokenizer, 0.0,
                       False)


def test_a_draft_with_another_tokenizer_keeps_plain_greedys_tokens(main, prompt):
    plain, _ = jax_run(main, prompt, RunSpec(backend="jax", max_new_tokens=NEW, min_new_tokens=NEW))
    same, chunks = jax_run(main, prompt, _spec(), draft=same_weights_other_tokenizer())
    assert same.sequences == plain.sequences and [t for c in chunks for t in c] == plain.sequences[0]
    assert same.extra["universal"] and same.extra["draft_tokens_accepted"] > 0
    assert same.forward_passes < len(plain.sequences[0])  # the drafts saved passes
    other, _ = jax_run(main, prompt, _spec(), draft=_other_tokenizer_draft(7))
    assert other.sequences == plain.sequences
    assert other.extra["draft_tokens_accepted"] < other.extra["draft_tokens_proposed"]  # some drafts rejected
    steps = other.assisted_steps or []
    assert sum(s["accepted"] + 1 for s in steps) == len(other.sequences[0])


@pytest.mark.slow  # the full suite's: the sampling programs of both models, which no fast test shares
def test_sampling_with_a_draft_of_another_tokenizer_is_seeded(main, prompt):
    spec = _spec(assisted_sampling=True, temperature=1.0, seed=3)
    draft = same_weights_other_tokenizer()
    first, _ = jax_run(main, prompt, spec, draft=draft)
    again, _ = jax_run(main, prompt, spec, draft=draft)
    assert first.sequences == again.sequences and len(first.sequences[0]) == NEW
    assert again.compile_s == 0.0  # a repeated request compiles nothing, the draft's programs included

"""JAX assisted decoding: drafts verified in one pass give plain greedy's tokens, counted honestly, compiled once.

Tiny random models never repeat themselves the way text does, so the prompts here are built to be found again:
a prompt that repeats a phrase, and the tiny model's own greedy output fed back as the prompt (then every
lookup draft is right until the text leaves what it has seen).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchax")
jax = pytest.importorskip("jax")

from playground.backends.jax.backend import JaxBackend  # noqa: E402
from playground.backends.jax.strategies import lookup as lookup_module  # noqa: E402
from playground.errors import PlaygroundError  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import fast_lane_keeps, jax_run, tiny_gemma, tiny_llama, tiny_loaded  # noqa: E402

NEW = 40
PROMPT = torch.tensor([[5, 17, 42, 99, 3, 5, 17, 42, 99, 3, 8, 9]])


@pytest.fixture(scope="module")
def llama():
    return tiny_loaded("tiny-llama", tiny_llama())


def spec(**overrides) -> RunSpec:
    values = {"backend": "jax", "cache": "static", "strategy": "assisted", "prompt_lookup": 5,
              "max_new_tokens": NEW, "min_new_tokens": NEW}
    values.update(overrides)
    return RunSpec(**values)


def plain(loaded, prompt, **overrides) -> list[int]:
    values = {"backend": "jax", "cache": "static", "max_new_tokens": NEW, "min_new_tokens": NEW, **overrides}
    out, _ = jax_run(loaded, prompt, RunSpec(**values))
    return out.sequences[0]


def assisted(loaded, prompt, run_spec: RunSpec, draft=None):
    chunks: list[list[int]] = []
    out = JaxBackend().generate(loaded, prompt[0].tolist(), run_spec, chunks.append, lambda: False, draft)
    return out, chunks


def grounded(loaded) -> torch.Tensor:
    """A prompt the model will largely repeat: its own greedy continuation of PROMPT, then PROMPT again."""
    own = plain(loaded, PROMPT, max_new_tokens=NEW, min_new_tokens=NEW)
    return torch.tensor([PROMPT[0].tolist() + own + PROMPT[0].tolist()])


# the full suite's: in the fast lane prompt lookup keeps plain greedy's tokens in the penalty test below, in the
# sliding cache's rollback test (its stream too), and in test_token_probabilities' assisted records on JAX
@pytest.mark.slow
@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_greedy_prompt_lookup_gives_plain_greedy_tokens(llama, cache):
    for prompt in (PROMPT, grounded(llama)):
        out, chunks = assisted(llama, prompt, spec(cache=cache))
        assert out.sequences[0] == plain(llama, prompt, cache=cache)
        assert [t for chunk in chunks for t in chunk] == out.sequences[0]


def test_repetition_penalty_sees_the_drafts_before_each_row(llama):
    """Each verified row is processed as if the drafts before it were already generated."""
    prompt = grounded(llama)
    out, _ = assisted(llama, prompt, spec(repetition_penalty=1.3, min_new_tokens=10))
    assert out.sequences[0] == plain(llama, prompt, repetition_penalty=1.3, min_new_tokens=10)
    assert out.extra["draft_tokens_accepted"] > 0


def test_counts_are_what_was_drafted_and_kept(llama):
    out, chunks = assisted(llama, grounded(llama), spec())
    drafted, accepted = out.extra["draft_tokens_proposed"], out.extra["draft_tokens_accepted"]
    assert drafted > 0 and 0 < accepted <= drafted
    assert out.acceptance_rate == pytest.approx(accepted / drafted)
    assert 0.0 <= out.acceptance_rate <= 1.0
    assert sum(out.draft_flags) == accepted  # the page underlines exactly the kept drafts
    assert len(out.draft_flags) == len(out.token_info) == len(out.sequences[0])
    # the prefill's token, then one chunk per verify pass: kept drafts plus the main model's own token
    assert out.forward_passes == len(chunks) == 1 + out.extra["verify_passes"]
    assert out.forward_passes < len(out.sequences[0])  # fewer passes than tokens: drafts were kept
    assert all(chunk_flags[-1] is False for chunk_flags in _split(out.draft_flags, chunks))


def test_each_verify_pass_records_its_drafts_and_what_was_kept(llama):
    """The steps the page draws its verification strip and struck-through drafts from, as the PyTorch path
    records them: a kept draft is the token written there, the first rejected one differs from it."""
    out, chunks = assisted(llama, grounded(llama), spec())
    steps = out.assisted_steps
    assert steps is not None and len(steps) == len(chunks) and steps[0] == {"drafted": [], "accepted": 0}
    assert sum(len(s["drafted"]) for s in steps) == out.extra["draft_tokens_proposed"]
    assert sum(s["accepted"] for s in steps) == out.extra["draft_tokens_accepted"]
    rejected_somewhere = False
    for step, chunk in zip(steps, chunks, strict=True):
        kept = step["accepted"]
        assert len(chunk) == kept + 1 and step["drafted"][:kept] == chunk[:kept]
        if kept < len(step["drafted"]):
            assert step["drafted"][kept] != chunk[kept]
            rejected_somewhere = True
    assert rejected_somewhere


def _split(flags: list[bool], chunks: list[list[int]]) -> list[list[bool]]:
    parts, at = [], 0
    for chunk in chunks:
        parts.append(flags[at: at + len(chunk)])
        at += len(chunk)
    return parts


@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
def test_eos_inside_the_drafts_ends_the_run():
    loaded = tiny_loaded("tiny-llama-eos", tiny_llama(seed=3))
    reference = plain(loaded, PROMPT, max_new_tokens=60, min_new_tokens=0)
    eos = reference[len(reference) // 2]  # make a mid-run token the stop token
    loaded.model.generation_config.eos_token_id = eos
    expected = plain(loaded, PROMPT, max_new_tokens=60, min_new_tokens=0)
    out, _ = assisted(loaded, torch.tensor([PROMPT[0].tolist() + reference]), spec(max_new_tokens=60,
                                                                                   min_new_tokens=0))
    prompt_again = torch.tensor([PROMPT[0].tolist() + reference])
    assert out.sequences[0] == plain(loaded, prompt_again, max_new_tokens=60, min_new_tokens=0)
    assert out.sequences[0][-1] == eos and expected[-1] == eos


def test_a_repeated_request_compiles_nothing(llama):
    assisted(llama, PROMPT, spec(cache="dynamic"))
    again, _ = assisted(llama, PROMPT, spec(cache="dynamic"))
    assert again.compile_s == 0.0


def test_lookup_matches_transformers_choice():
    import numpy as np

    history = np.array([1, 2, 3, 4, 9, 2, 3, 5, 6, 2, 3])
    assert lookup_module.lookup(history, 3).tolist() == [4, 9, 2]  # first match of the bigram (2, 3)
    assert lookup_module.lookup(np.array([7, 1, 8, 1]), 2).tolist() == [8, 1]  # unigram fallback
    assert lookup_module.lookup(np.array([1, 2, 3]), 4).tolist() == []


def test_one_source_of_drafts_is_required_before_anything_loads():
    with pytest.raises(PlaygroundError, match="exactly one source of draft tokens"):
        spec(assistant="smollm2-135m")


BOUNDED = {  # windows of 12 and 16 over 12 + 60 tokens; residual flushes every 4 or 8 tokens
    "sliding": {"cache": "sliding", "window": 12},
    "sink": {"cache": "sink", "window": 16, "sink_tokens": 4},
    "fp8-groups": {"cache": "quantized", "cache_bits": 8},
    "quantized-4": {"cache": "quantized", "cache_bits": 4, "residual_length": 8},
    "quantized-2": {"cache": "quantized", "cache_bits": 2, "residual_length": 4},
}


QUICK = ("sliding",)  # each cache compiles its own programs: the quick lane keeps one


@pytest.mark.parametrize("cache", [*QUICK, *(pytest.param(name, marks=pytest.mark.slow)
                                             for name in BOUNDED if name not in QUICK)])
def test_bounded_and_quantized_caches_roll_drafts_back_to_plain_greedys_tokens(llama, cache):
    """A verify pass writes into spare ring slots and each of its tokens sees what a single step would: without
    the spare slots these runs leave plain greedy's text within a few tokens."""
    for prompt in (PROMPT, grounded(llama)):
        out, chunks = assisted(llama, prompt, spec(max_new_tokens=60, min_new_tokens=60, **BOUNDED[cache]))
        assert out.sequences[0] == plain(llama, prompt, max_new_tokens=60, min_new_tokens=60, **BOUNDED[cache])
        assert [t for chunk in chunks for t in chunk] == out.sequences[0]
        steps = out.assisted_steps
        assert sum(len(step["drafted"]) - step["accepted"] for step in steps) > 0  # rollback was exercised


@pytest.mark.slow  # compiles Gemma3's programs, which no quick test shares
@pytest.mark.parametrize("cache", ["static", "sliding"])
def test_a_model_with_its_own_sliding_layers_runs_assisted_decoding(cache):
    """Gemma3 in miniature (window 8): 12 + 60 tokens cross its window many times."""
    gemma = tiny_loaded("tiny-gemma", tiny_gemma(sliding_window=8))
    for prompt in (PROMPT, grounded(gemma)):
        out, _ = assisted(gemma, prompt, spec(cache=cache, max_new_tokens=60, min_new_tokens=60))
        assert out.sequences[0] == plain(gemma, prompt, cache=cache, max_new_tokens=60, min_new_tokens=60)
        assert out.acceptance_rate is not None and 0 < out.acceptance_rate < 1


def test_a_bounded_cache_stays_bounded_through_assisted_decoding(llama):
    """The spare slots are the only extra: the cache's bytes stop growing once the window is full."""
    sliding = BOUNDED["sliding"]
    out, _ = assisted(llama, PROMPT, spec(max_new_tokens=60, min_new_tokens=60, **sliding))
    longer, _ = assisted(llama, PROMPT, spec(max_new_tokens=120, min_new_tokens=120, **sliding))
    assert out.kv_cache_bytes == longer.kv_cache_bytes
    # a ring of window + width - 1 slots: (k, v) x 2 kv heads x 16 dims x 4 bytes, per layer
    layers = llama.model.config.num_hidden_layers
    assert out.kv_cache_bytes == (12 + 5) * 2 * 2 * 16 * 4 * layers


# -- sampling ---------------------------------------------------------------------------------------------------

@pytest.mark.slow  # the sampling programs: the fast lane checks speculative sampling's rule below
def test_seeded_assisted_sampling_reproduces_and_top_k_1_is_greedy(llama):
    prompt = grounded(llama)
    sampled = spec(assisted_sampling=True, temperature=1.5, top_k=0, seed=7)
    first, _ = assisted(llama, prompt, sampled)
    again, _ = assisted(llama, prompt, sampled)
    other, _ = assisted(llama, prompt, sampled.replace(seed=8))
    assert first.sequences[0] == again.sequences[0] != other.sequences[0]
    assert first.draft_flags == again.draft_flags
    assert 0.0 <= first.acceptance_rate <= 1.0
    one_hot, _ = assisted(llama, prompt, spec(assisted_sampling=True, top_k=1, seed=3))
    assert one_hot.sequences[0] == plain(llama, prompt)


@pytest.mark.parametrize("one_hot", [True, False])
def test_speculative_sampling_draws_from_the_main_distribution(one_hot):
    """Draft d ~ q, kept with min(1, p(d) / q(d)), else a draw from norm(max(0, p - q)): the first token is ~ p."""
    import jax.numpy as jnp
    import numpy as np

    from playground.backends.jax.strategies import speculative

    p = jnp.array([0.5, 0.3, 0.15, 0.05])
    q = jnp.array([0.1, 0.2, 0.3, 0.4])
    draws = 40_000

    def first_token(key):
        draft_key, verify_key = jax.random.split(key)
        draft = jax.random.categorical(draft_key, jnp.log(q)).astype(jnp.int32)
        if one_hot:  # prompt lookup: q is one-hot at the draft, the draft itself still arrives as drafted
            q_rows = None
        else:
            q_rows = q[None, None, :]
        final = jnp.stack([p, p])[:, None, :]  # (W=2, B=1, V)
        tokens, _, _ = speculative.sample(final, draft[None, None], jnp.int32(1), q_rows, verify_key)
        return tokens[0]

    firsts = jax.jit(jax.vmap(first_token))(jax.random.split(jax.random.PRNGKey(0), draws))
    freq = np.bincount(np.asarray(firsts), minlength=4) / draws
    assert np.abs(freq - np.asarray(p)).max() < 0.01


def test_assisted_sampling_is_speculative_sampling_on_torch_too(llama):
    from playground.backends.torch.config import generation_config
    from playground.registry import chain

    run_spec = spec(backend="torch", cache="dynamic", assisted_sampling=True, top_k=20)
    config = generation_config(run_spec, llama.model)
    assert config.do_sample and config.prompt_lookup_num_tokens == 5
    assert "top_k" in [stage.name for stage in chain.stages(run_spec)]  # the chain's sampling stages apply
    with pytest.raises(PlaygroundError, match="needs strategy 'assisted'"):
        RunSpec(assisted_sampling=True)


# -- a draft model ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def drafts():
    """A draft identical to the main model (another object, so another engine), and an unrelated smaller one."""
    return {"same": tiny_loaded("tiny-llama-copy", tiny_llama()),
            "other": tiny_loaded("tiny-llama-small", tiny_llama(seed=5, num_hidden_layers=1))}


def draft_spec(**overrides) -> RunSpec:
    return spec(prompt_lookup=0, assistant="tiny-draft", **overrides)


@pytest.mark.parametrize("cache", fast_lane_keeps(["static", "dynamic"], keep=1))  # the fast lane: dynamic
@pytest.mark.parametrize("which", ["same", "other"])
def test_greedy_with_a_draft_model_gives_plain_greedy_tokens(llama, drafts, cache, which):
    out, chunks = assisted(llama, PROMPT, draft_spec(cache=cache), drafts[which])
    assert out.sequences[0] == plain(llama, PROMPT, cache=cache)
    assert [t for chunk in chunks for t in chunk] == out.sequences[0]
    drafted, accepted = out.extra["draft_tokens_proposed"], out.extra["draft_tokens_accepted"]
    assert out.acceptance_rate == pytest.approx(accepted / drafted) and sum(out.draft_flags) == accepted
    if which == "same":
        assert out.acceptance_rate == 1.0
        # 16 drafts + 1 per pass after the prefill's token: ceil(39 / 17) passes
        assert out.forward_passes == 1 + 3
    else:
        assert out.acceptance_rate < 0.5


@pytest.mark.slow  # compiles the bounded caches' draft-model programs, which no quick test shares
@pytest.mark.parametrize("cache", ["sink", "quantized-4"])
def test_a_draft_model_over_a_bounded_or_quantized_cache_gives_plain_greedy_tokens(llama, drafts, cache):
    knobs = {"max_new_tokens": 60, "min_new_tokens": 60, **BOUNDED[cache]}
    out, _ = assisted(llama, PROMPT, draft_spec(**knobs), drafts["other"])
    assert out.sequences[0] == plain(llama, PROMPT, **knobs)
    assert out.acceptance_rate < 1  # an unrelated draft: its rejected drafts were rolled back


def test_the_draft_count_follows_transformers_schedule():
    from playground.backends.jax.strategies.draft import MAX_DRAFTS, next_draft_count

    assert next_draft_count(4, 4) == 6 and next_draft_count(4, 2) == 3 and next_draft_count(1, 0) == 1
    assert next_draft_count(MAX_DRAFTS, MAX_DRAFTS) == MAX_DRAFTS


@pytest.mark.slow  # a sweep of JAX compiles no other fast test shares: full suite only
def test_seeded_sampling_with_a_draft_model_reproduces(llama, drafts):
    sampled = draft_spec(assisted_sampling=True, temperature=1.3, top_k=0, seed=11)
    first, _ = assisted(llama, PROMPT, sampled, drafts["other"])
    again, _ = assisted(llama, PROMPT, sampled, drafts["other"])
    assert first.sequences[0] == again.sequences[0] and first.draft_flags == again.draft_flags
    assert 0.0 <= first.acceptance_rate <= 1.0
    same, _ = assisted(llama, PROMPT, sampled, drafts["same"])
    assert same.acceptance_rate == 1.0  # q == p: min(1, p / q) = 1, every draft is kept


def test_a_repeated_draft_model_request_compiles_nothing(llama, drafts):
    assisted(llama, PROMPT, draft_spec(), drafts["other"])
    again, _ = assisted(llama, PROMPT, draft_spec(), drafts["other"])
    assert again.compile_s == 0.0

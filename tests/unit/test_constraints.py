"""Constrained decoding on a tiny random model over the byte tokenizer: every kind of constraint under greedy,
sampling (3 seeds), beam search and assisted decoding gives a valid output on both backends; greedy gives the same
tokens and mask records on JAX, and beam search the same beams, every one valid; the mask is llguidance's own at
every step; assisted decoding gives constrained greedy's tokens on both backends, its drafts stopping where the
grammar does; a beam's matcher follows its beam; bad constraints are one line before anything loads."""

from __future__ import annotations

import json

import pytest
import torch

from playground.backends.torch.chain import TorchContext
from playground.backends.torch.constrained import ConstraintMask
from playground.constraints import grammar
from playground.constraints.matching import allowed_tokens, token_index
from playground.constraints.record import constraint_record
from playground.constraints.verdict import INCOMPLETE, judge
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from tests.helpers import jax_run, tiny_llama, tiny_loaded, torch_run

EOS = 256
PROMPT = torch.tensor([[72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]])
# a schema whose JSON ends soon whatever a random model prefers: no free whitespace, bounded values
SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                                      "ok": {"type": "boolean"}},
                     "required": ["n", "ok"], "additionalProperties": False,
                     "x-guidance": {"whitespace_flexible": False}})
CONSTRAINTS = {"regex": "[0-9]{1,3}(-[a-c]{1,2})?", "json_schema": SCHEMA, "choice": "red\ngreen\nblue",
               "grammar": 'start: "(" item ("," item)? ("," item)? ")"\nitem: "x" | "yz"'}
STRATEGIES = {"greedy": {}, "sampling": {"temperature": 1.0, "top_k": 0}, "beam": {"num_beams": 3,
              "num_return_sequences": 3}, "assisted": {"prompt_lookup": 2}}


@pytest.fixture(scope="module")
def tiny():
    return tiny_loaded("tiny-constrained", tiny_llama(seed=5))


def _spec(kind: str, strategy: str = "greedy", **knobs) -> RunSpec:
    return RunSpec.from_dict({"strategy": strategy, "constraint": kind, "constraint_text": CONSTRAINTS[kind],
                              "max_new_tokens": 24, **STRATEGIES[strategy], **knobs})


def _verdict(tiny, spec: RunSpec, out) -> dict:
    return constraint_record(spec, tiny.tokenizer, out)


# JAX's half in the full suite: the fast lane checks JAX's greedy, sampling, beam search and prompt lookup below
@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=pytest.mark.slow)])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_every_constraint_gives_a_valid_output_under_every_strategy(tiny, kind, strategy, backend):
    run = torch_run if backend == "torch" else jax_run
    for seed in (0, 1, 2) if strategy == "sampling" else (0,):
        spec = _spec(kind, strategy, seed=seed, backend=backend)
        out, _ = run(tiny, PROMPT, spec)
        record = _verdict(tiny, spec, out)
        assert record["valid"] and record["verdict"] == "valid", (kind, strategy, seed, record)
        assert all(record["sequences_valid"]) and len(record["sequences_valid"]) == len(out.sequences)
        assert out.sequences[0][-1] == EOS  # it ended where the grammar did: EOS only where it accepts


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_constrained_greedy_tokens_and_the_masks_record_agree_across_the_backends(tiny, kind):
    spec = _spec(kind)
    on_torch, _ = torch_run(tiny, PROMPT, spec)
    on_jax, _ = jax_run(tiny, PROMPT, spec.replace(backend="jax", cache="static"))
    assert on_jax.sequences == on_torch.sequences and _verdict(tiny, spec, on_jax)["valid"]
    for mine, theirs in zip(on_jax.token_info or [], on_torch.token_info or [], strict=True):
        (name, removed, moved), (_, removed_there, moved_there) = mine["stages"][0], theirs["stages"][0]
        assert name == "constraint" and removed == removed_there and moved == pytest.approx(moved_there, abs=1e-4)
    assert on_jax.extra["steps_per_call"] == 1  # the host's mask before every step


def test_constrained_sampling_on_jax_is_valid_and_seeded(tiny):
    for seed in (0, 1, 2):
        spec = _spec("json_schema", "sampling", seed=seed, backend="jax", cache="static")
        out, _ = jax_run(tiny, PROMPT, spec)
        assert _verdict(tiny, spec, out)["valid"]
        assert jax_run(tiny, PROMPT, spec)[0].sequences == out.sequences


@pytest.mark.parametrize("kind", ["json_schema", "choice", "grammar"])
def test_constrained_beam_search_on_jax_gives_pytorchs_valid_beams(tiny, kind):
    """Each beam's matcher follows its beam through the reordering: every returned sequence is valid, and the
    search is PyTorch's, sequences and scores."""
    spec = _spec(kind, "beam")
    on_torch, _ = torch_run(tiny, PROMPT, spec)
    on_jax, _ = jax_run(tiny, PROMPT, spec.replace(backend="jax"))
    record = _verdict(tiny, spec, on_jax)
    assert record["valid"] and all(record["sequences_valid"]) and len(record["sequences_valid"]) == 3
    assert on_jax.sequences == on_torch.sequences
    assert on_jax.scores == pytest.approx(on_torch.scores, abs=1e-4)
    assert on_jax.extra["decode_calls"] == on_jax.forward_passes - 1  # one step per call, masks between


def test_constrained_prompt_lookup_on_jax_gives_constrained_greedys_tokens(tiny):
    """Each verify position gets the mask after the drafts before it; a draft the grammar forbids ends the drafts
    (its own row's mask rejects it)."""
    prompt = torch.tensor([tiny.tokenizer.encode("(yz)(yz)(yz)(yz)(")])
    greedy, _ = jax_run(tiny, prompt, _spec("grammar", backend="jax"))
    looked_up, _ = jax_run(tiny, prompt, _spec("grammar", "assisted", prompt_lookup=5, backend="jax"))
    assert looked_up.sequences == greedy.sequences and _verdict(tiny, _spec("grammar"), looked_up)["valid"]
    assert looked_up.extra["draft_tokens_accepted"] > 0
    refused, _ = _refused_drafts(tiny, looked_up)
    assert refused >= 1  # the prompt goes on with "(", which the ended grammar forbids: rejected by the mask


@pytest.mark.slow  # the full suite's: a draft model's programs no fast test shares
def test_a_constrained_draft_model_on_jax_gives_constrained_greedys_tokens_and_samples_validly(tiny):
    """The JAX draft proposes unconstrained; the verify pass's mask rows keep constrained greedy's tokens, and
    under speculative sampling a forbidden draft has p = 0, so it is always rejected."""
    draft = tiny_loaded("tiny-draft", tiny_llama(seed=11))
    drafted, _ = jax_run(tiny, PROMPT, _spec("grammar", "assisted", prompt_lookup=0, assistant="tiny-draft",
                                             backend="jax"), draft=draft)
    assert drafted.sequences == jax_run(tiny, PROMPT, _spec("grammar", backend="jax"))[0].sequences
    for seed in (0, 1):
        spec = _spec("json_schema", "assisted", prompt_lookup=0, assistant="tiny-draft", assisted_sampling=True,
                     temperature=1.0, seed=seed, backend="jax")
        assert _verdict(tiny, spec, jax_run(tiny, PROMPT, spec, draft=draft)[0])["valid"]


def test_the_mask_is_llguidances_own_at_every_step(tiny):
    spec = _spec("json_schema")
    out, _ = torch_run(tiny, PROMPT, spec)
    mask = ConstraintMask(spec, TorchContext(PROMPT.shape[1], (EOS,), tiny.tokenizer, torch.device("cpu")))
    fresh = grammar.matcher(token_index(tiny.tokenizer, 257, (EOS,)), "json_schema", SCHEMA)
    generated = out.sequences[0]
    for step, token in enumerate(generated):
        ids = torch.cat([PROMPT, torch.tensor([generated[:step]], dtype=torch.long)], dim=1)
        scores = mask(ids, torch.zeros(1, 257))
        expected = allowed_tokens(fresh, 257)
        assert torch.equal(torch.isfinite(scores[0]), torch.from_numpy(expected)), step
        assert expected[token]  # the run took an allowed token
        if token != EOS:
            assert fresh.consume_token(token)
    assert fresh.is_accepting()


def test_the_cost_is_recorded_per_token_and_summed_up(tiny):
    spec = _spec("choice")
    out, _ = torch_run(tiny, PROMPT, spec)
    record = _verdict(tiny, spec, out)
    stages = [dict((name, (removed, moved)) for name, removed, moved in info["stages"]) for info in out.token_info]
    assert all("constraint" in s for s in stages)
    assert stages[0]["constraint"][0] == 257 - 3  # red, green, blue: one first token each, nothing else
    mean = sum(s["constraint"][1] for s in stages) / len(stages)
    assert record["mass_removed_mean"] == pytest.approx(mean, abs=1e-5)
    changed = sum(1 for info in out.token_info if info["top_cut"][0] == "constraint")
    assert record["changed_steps"] == changed >= 1  # a random model's favourite is seldom a colour's letter


def _refused_drafts(tiny, out) -> tuple[int, int]:
    """(drafted tokens the grammar forbade where they were proposed, drafted tokens in all); a pass's drafts
    stop counting at its first forbidden one."""
    index = token_index(tiny.tokenizer, 257, (EOS,))
    refused = drafted_in_all = position = 0
    for step in out.assisted_steps or []:
        state = grammar.matcher(index, "grammar", CONSTRAINTS["grammar"])
        assert all(state.consume_token(t) for t in out.sequences[0][:position])
        for token in step["drafted"]:
            drafted_in_all += 1
            if not allowed_tokens(state, 257)[token]:
                refused += 1
                break
            state.consume_token(token)
        position += step["accepted"] + 1
    return refused, drafted_in_all


def test_assisted_decoding_gives_constrained_greedys_tokens_and_drafts_stop_where_the_grammar_does(tiny):
    """transformers hands the main run's logits processors, the constraint among them, to what drafts: a draft
    model's generate() and prompt lookup's candidate check. So no draft proposes a token the grammar forbids: a
    lookup draft is cut where the grammar ends, and the verify pass keeps constrained greedy's tokens."""
    greedy, _ = torch_run(tiny, PROMPT, _spec("grammar"))
    draft = tiny_loaded("tiny-draft", tiny_llama(seed=11))
    drafted, _ = torch_run(tiny, PROMPT, _spec("grammar", "assisted", prompt_lookup=0, assistant="tiny-draft"),
                           draft=draft)
    assert drafted.sequences[0] == greedy.sequences[0]
    assert _refused_drafts(tiny, drafted) == (0, sum(len(s["drafted"]) for s in drafted.assisted_steps or []))
    prompt = torch.tensor([tiny.tokenizer.encode("(yz)(yz)(yz)(yz)(")])
    looked_up, _ = torch_run(tiny, prompt, _spec("grammar", "assisted", prompt_lookup=5))
    assert looked_up.sequences[0] == torch_run(tiny, prompt, _spec("grammar"))[0].sequences[0]
    assert _refused_drafts(tiny, looked_up)[0] == 0
    close = tiny.tokenizer.encode(")")[0]
    cut = [s["drafted"] for s in looked_up.assisted_steps or [] if 0 < len(s["drafted"]) < 5]
    assert any(d[-1] == close for d in cut)  # the prompt went on with "(", which the ended grammar forbids


def test_a_constraint_that_allows_everything_leaves_the_tokens_alone():
    """Any text matches `(?s:.*)`; on the byte tokenizer it still masks bytes that can never be UTF-8, so the model
    is one (seed 7) whose unconstrained greedy text is ASCII."""
    ascii_model = tiny_loaded("tiny-ascii", tiny_llama(seed=7))
    spec = RunSpec(max_new_tokens=16)
    plain, _ = torch_run(ascii_model, PROMPT, spec)
    constrained, _ = torch_run(ascii_model, PROMPT, spec.replace(constraint="regex", constraint_text="(?s:.*)"))
    assert constrained.sequences == plain.sequences
    assert all(info["top_cut"][0] != "constraint" for info in constrained.token_info or [])
    assert _verdict(ascii_model, spec.replace(constraint="regex", constraint_text="(?s:.*)"), constrained)["valid"]


def test_bad_constraints_are_one_line_before_anything_loads():
    cases = {("regex", "[0-9"): "constraint_text is not a valid regular expression: .*unclosed character class",
             ("json_schema", "{bad"): "constraint_text is not valid JSON for a JSON schema",
             ("json_schema", '{"type": "objec"}'): "constraint_text is not a valid JSON schema: Invalid type",
             ("grammar", "start: foo"): 'constraint_text is not a valid Lark grammar: .*unknown name: "foo"',
             ("choice", " | "): "holds no choice",
             ("regex", ""): "needs its regular expression"}
    for (kind, text), message in cases.items():
        with pytest.raises(PlaygroundError, match=message) as caught:
            RunSpec.from_dict({"constraint": kind, "constraint_text": text})
        assert "\n" not in str(caught.value)
    with pytest.raises(PlaygroundError, match="min_new_tokens=3 would forbid the end"):
        RunSpec.from_dict({"constraint": "regex", "constraint_text": "a", "min_new_tokens": 3})
    with pytest.raises(PlaygroundError, match="cannot move the constraint"):
        RunSpec.from_dict({"constraint": "regex", "constraint_text": "a", "sampler_order": "constraint,top_k"})
    with pytest.raises(PlaygroundError, match="constraint is 'none'"):
        RunSpec.from_dict({"constraint_text": "a"})


def test_public_deployments_cap_a_constraints_size_and_compile_time(monkeypatch, tiny):
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "1")
    with pytest.raises(PlaygroundError, match="this deployment allows 20,000"):
        RunSpec.from_dict({"constraint": "choice", "constraint_text": "a|" * 10_001})
    monkeypatch.setenv("PLAYGROUND_MAX_GRAMMAR_COMPILE_S", "0")
    with pytest.raises(PlaygroundError, match="to compile; this deployment allows 0 s"):
        grammar.matcher(token_index(tiny.tokenizer, 257, (EOS,)), "regex", "[0-9]+")


def test_the_verdict_is_judged_apart_from_the_engine():
    assert judge("regex", "[0-9]+", "123", True)["verdict"] == "valid"
    assert judge("regex", "[0-9]{3}", "12", False)["verdict"] == INCOMPLETE
    schema = json.dumps({"type": "object", "required": ["a"]})
    refused = judge("json_schema", schema, '{"b": 1}', True)
    assert not refused["valid"] and refused["verdict"].startswith("invalid: the schema refuses it")
    assert judge("choice", "yes|no", "no", True)["checked_by"] == "the list of choices"
    assert judge("grammar", 'start: "a"+', "aaa", True)["checked_by"] == "lark"
    assert "lark cannot read it" in judge("grammar", 'start: %json {"type": "integer"}', "12", True)["checked_by"]


def test_the_choices_of_a_list_are_lines_or_bars():
    assert grammar.choices("red\ngreen\n\nblue ") == ["red", "green", "blue"]
    assert grammar.choices("yes | no|yes") == ["yes", "no"]


@pytest.mark.slow  # the full suite's: DoLa's and beam sampling's programs under a mask
def test_dola_and_beam_sampling_run_constrained_on_jax(tiny):
    """DoLa reads plain decoding's host matcher (one step per call), beam sampling each beam's: DoLa gives the
    PyTorch path's constrained tokens, and every sampled beam is valid."""
    spec = _spec("json_schema").replace(strategy="dola", dola_layers="0", repetition_penalty=1.2)
    on_torch, _ = torch_run(tiny, PROMPT, spec)
    on_jax, _ = jax_run(tiny, PROMPT, spec.replace(backend="jax"))
    assert on_jax.sequences == on_torch.sequences and _verdict(tiny, spec, on_jax)["valid"]
    for seed in (0, 1):
        sampled = _spec("choice", "beam").replace(strategy="beam_sample", temperature=1.0, seed=seed, backend="jax")
        record = _verdict(tiny, sampled, jax_run(tiny, PROMPT, sampled)[0])
        assert all(record["sequences_valid"]) and len(record["sequences_valid"]) == 3

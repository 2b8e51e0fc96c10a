"""Diverse (group) beam search on the JAX path (playground/backends/jax/diverse_beam*.py): transformers 4.52.4's
sequences and sequences_scores on the recorded tiny models (tests/references/guide_methods.json), the PyTorch
port's search and tree by group under other settings, and every cache.

Tiny random-weight models only, each built once per file so that it compiles its programs once.
"""

from __future__ import annotations

import functools

import pytest
import torch

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground import registry  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import jax_run, tiny_llama, tiny_loaded, torch_run  # noqa: E402
from tests.unit.test_guide_references import records, reference_model  # noqa: E402

TINY = records("diverse_beam_search", "tiny")
PROMPT = torch.tensor([[5, 17, 42, 99, 3]])


@functools.cache
def recorded(name: str, eos: int, pad: int):
    """A reference model (its own object: the other files' shared one stays untouched), with the record's ids."""
    model = reference_model(name)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = eos, pad
    return tiny_loaded(name, model)


def _spec(record: dict, **changed) -> RunSpec:
    kwargs = record["generate_kwargs"]
    values = {"strategy": "diverse_beam", "backend": "jax", "cache": "dynamic", "num_beams": kwargs["num_beams"],
              "num_beam_groups": kwargs["num_beam_groups"], "diversity_penalty": kwargs["diversity_penalty"],
              "num_return_sequences": kwargs["num_return_sequences"], "length_penalty": kwargs["length_penalty"],
              "early_stopping": kwargs["early_stopping"], "max_new_tokens": kwargs["max_new_tokens"]}
    return RunSpec(**{**values, **changed})


def _loaded(record: dict):
    return recorded(record["model"], record["generate_kwargs"]["eos_token_id"],
                    record["generate_kwargs"]["pad_token_id"])


# the full suite: every record; the fast lane compares JAX with the PyTorch port below, which test_torch_diverse_beam
# holds to transformers 4.52
@pytest.mark.parametrize("record", [pytest.param(r, id=r["id"], marks=pytest.mark.slow) for r in TINY])
def test_tiny_models_give_transformers_4_52_sequences_and_scores(record):
    out, emitted = jax_run(_loaded(record), torch.tensor([record["prompt_ids"]]), _spec(record))
    assert out.sequences == record["output"]["sequences"]
    assert out.scores == pytest.approx(record["output"]["sequences_scores"], abs=1e-4)
    assert emitted == [out.sequences[0]]  # nothing streams: the best sequence arrives whole
    assert {node["group"] for step in out.beam_tree for node in step} == {0, 1}


def diverse(**overrides) -> RunSpec:
    values = {"strategy": "diverse_beam", "cache": "dynamic", "max_new_tokens": 20}
    return RunSpec(**{**values, **overrides})


def nodes(tree):
    """A beam tree without its float figures: what was weighed, kept, finished and returned, and by which group."""
    return [[(n["parent"], n["token"], n["kept"], n["finished"], n["chosen"], n["group"]) for n in step]
            for step in tree]


def assert_same_search(loaded, spec, prompt=PROMPT, should_stop=lambda: False, torch_stop=None):
    """The JAX path returns what the PyTorch port returns: sequences, scores (1e-4) and the tree by group, with
    each node's score and the diversity penalty it paid."""
    ours, emitted = jax_run(loaded, prompt, spec.replace(backend="jax"), should_stop)
    theirs, _ = torch_run(loaded, prompt, spec, torch_stop or should_stop)
    assert ours.sequences == theirs.sequences and len(ours.sequences) == spec.num_return_sequences
    assert ours.scores == pytest.approx(theirs.scores, abs=1e-4)
    assert nodes(ours.beam_tree) == nodes(theirs.beam_tree)
    for key in ("score", "penalty"):
        assert [n[key] for step in ours.beam_tree for n in step] == pytest.approx(
            [n[key] for step in theirs.beam_tree for n in step], abs=1e-4)
    assert emitted == [ours.sequences[0]]
    return ours


@pytest.fixture(scope="module")
def eos_model():
    """A tiny Llama whose EOS is a token its beams reach early, so that hypotheses finish along the way and
    groups end before the length limit (then run on the pad)."""
    loaded = tiny_loaded("tiny-llama-diverse-eos", tiny_llama(seed=1))
    free, _ = torch_run(loaded, PROMPT, diverse(num_beams=4, num_beam_groups=2))
    loaded.model.generation_config.eos_token_id = free.sequences[0][5]
    return loaded


@pytest.mark.parametrize("knobs", [
    {"num_beams": 6, "num_beam_groups": 3, "diversity_penalty": 0.5, "num_return_sequences": 4},
    pytest.param({"num_beams": 4, "num_beam_groups": 2, "length_penalty": 0.5, "early_stopping": True,
                  "num_return_sequences": 3}, marks=pytest.mark.slow),
    # a small penalty, so that group 1 sometimes takes group 0's token anyway and pays for it
    pytest.param({"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1e-3, "repetition_penalty": 1.3,
                  "min_new_tokens": 4, "cache": "static"}, marks=pytest.mark.slow),
])
def test_jax_gives_the_pytorch_ports_search_and_its_tree_by_group(eos_model, knobs):
    out = assert_same_search(eos_model, diverse(**knobs))
    groups = knobs["num_beam_groups"]
    assert {n["group"] for step in out.beam_tree for n in step} == set(range(groups))
    assert any(n["finished"] for step in out.beam_tree[:-1] for n in step)  # EOS ended hypotheses on the way
    if knobs.get("diversity_penalty", 1.0) < 0.1:
        assert any(n["penalty"] > 0 for step in out.beam_tree for n in step)  # a later group paid for a token
    assert out.extra["beam_candidates"] == 2 * knobs["num_beams"] and out.extra["beam_groups"] == groups
    if knobs.get("early_stopping"):  # a group that is done records nothing more: it runs on the pad
        assert any({n["group"] for n in step} != set(range(groups)) for step in out.beam_tree)


@pytest.mark.slow  # the fast lane keeps beam search's stop (test_jax_beam.py); this group search's is full-suite
def test_a_stop_finishes_the_search_as_the_pytorch_port_does():
    """The stop is read before each chunk on JAX and at each step on PyTorch: stopping before the second chunk
    (after 9 steps) is PyTorch's stop at its 10th step; both finalize after that step (the running beams come
    back one EOS longer, as 4.52 padded them). The programs are compiled first."""
    loaded = tiny_loaded("tiny-llama-diverse", tiny_llama())
    spec = diverse(num_beams=4, num_beam_groups=2, num_return_sequences=2)
    jax_run(loaded, PROMPT, spec.replace(backend="jax"))
    calls = {"jax": 0, "torch": 0}

    def stop(side: str, after: int):
        def should_stop() -> bool:
            calls[side] += 1
            return calls[side] >= after
        return should_stop

    out = assert_same_search(loaded, spec, should_stop=stop("jax", 2), torch_stop=stop("torch", 10))
    assert out.stopped and len(out.beam_tree) == 10 and len(out.sequences[0]) == 11
    assert out.compile_s == 0.0  # a repeated request compiles nothing
    other, _ = jax_run(loaded, PROMPT, spec.replace(backend="jax", diversity_penalty=0.25, length_penalty=0.5))
    assert other.compile_s == 0.0  # nor do other penalties: they are arguments of the programs


@pytest.mark.slow  # the full suite's: the fast lane keeps the reference and PyTorch parity
def test_every_cache_runs_and_a_full_one_gives_the_dynamic_caches_search():
    """The rows of every layout move with their beam: the static cache gives the dynamic one's search, every
    cache with a PyTorch twin (the bounded ones over the same windows) the PyTorch port's, and the quantized one
    runs (its store is its own)."""
    record = TINY[0]
    loaded, ids = _loaded(record), torch.tensor([record["prompt_ids"]])
    knobs = {"window": 8, "sink_tokens": 2, "cache_bits": 8, "max_new_tokens": 20}
    runs = {cache: jax_run(loaded, ids, _spec(record, cache=cache, **knobs))[0] for cache in registry.cache_names()}
    assert runs["static"].sequences == runs["dynamic"].sequences
    assert runs["static"].scores == pytest.approx(runs["dynamic"].scores, abs=1e-5)
    for cache in ("dynamic", "sliding", "sink"):  # rings of 8 positions, wrapped over 20 tokens
        theirs, _ = torch_run(loaded, ids, _spec(record, cache=cache, backend="torch", **knobs))
        assert runs[cache].sequences == theirs.sequences
        assert runs[cache].scores == pytest.approx(theirs.scores, abs=1e-4)
    assert runs["sliding"].kv_cache_bytes < runs["dynamic"].kv_cache_bytes / 2
    assert len(runs["quantized"].sequences) == 4 and runs["quantized"].kv_cache_bytes > 0


@pytest.mark.slow  # the full suite's: the fast lane keeps the reference and PyTorch parity
def test_a_constrained_diverse_search_follows_each_beam_and_gives_the_pytorch_ports_beams():
    """Each row's matcher follows its beam through the reordering (one step per call, masks between). A
    grammar that always allows more than the candidates weighed: where fewer are allowed, candidates tie at
    -inf, and torch.topk orders ties its own way (those beams can never win, but a later group would pay for
    their tokens)."""
    loaded = tiny_loaded("tiny-diverse-constrained", tiny_llama(seed=5))
    spec = RunSpec.from_dict({"strategy": "diverse_beam", "num_beams": 4, "num_beam_groups": 2,
                              "num_return_sequences": 3, "max_new_tokens": 16, "constraint": "regex",
                              "constraint_text": "[a-z]{2,30}"})
    out = assert_same_search(loaded, spec)
    assert [r.accepting for r in out.constraint_replay] == [True] * 3
    assert out.extra["decode_calls"] == out.forward_passes - 1 and out.extra["steps_per_call"] == 1


@pytest.mark.slow
def test_smollm2_gives_transformers_4_52_sequences_and_scores():
    from tests.helpers import bundled

    record = records("diverse_beam_search", "bundled")[0]
    out, _ = jax_run(bundled("smollm2-135m"), torch.tensor([record["prompt_ids"]]), _spec(record))
    assert out.sequences == record["output"]["sequences"]
    assert out.scores == pytest.approx(record["output"]["sequences_scores"], abs=1e-4)

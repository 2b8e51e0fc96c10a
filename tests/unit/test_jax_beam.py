"""JAX beam search: the sequences, scores and beam tree of transformers' beam search, over every cache.

Tiny random-weight models (a Llama and a Gemma3 whose sliding window of 8 is crossed), module-scoped so each
compiles its programs once; the bundled models' parity is in tests/integration/test_jax_beam.py.
"""

from __future__ import annotations

import functools

import pytest
import torch

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground import runner  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import (  # noqa: E402
    allowed_tiny_model,
    fast_lane_keeps,
    jax_run,
    jax_teacher_forced,
    tiny_gemma,
    tiny_llama,
    tiny_loaded,
    torch_run,
)

PROMPT = torch.tensor([[5, 17, 42, 99, 3]])


@functools.cache
def model(which: str):
    """One model object per kind for the whole file: each compiles its programs once."""
    return tiny_loaded(f"tiny-{which}", tiny_llama() if which == "llama" else tiny_gemma(sliding_window=8))


@pytest.fixture
def llama():
    return model("llama")


def beam(**overrides) -> RunSpec:
    values = {"strategy": "beam", "cache": "static", "max_new_tokens": 24}
    return RunSpec(**{**values, **overrides})


def shape(tree):
    """A beam tree without its scores: what was weighed, kept, finished and returned."""
    return [[(n["parent"], n["token"], n["kept"], n["finished"], n["chosen"]) for n in step] for step in tree]


def assert_same_search(loaded, spec, prompt=PROMPT, should_stop=lambda: False, torch_stop=None):
    """The JAX path returns what transformers' beam search returns: sequences, scores (1e-4) and the tree."""
    ours, emitted = jax_run(loaded, prompt, spec.replace(backend="jax"), should_stop)
    theirs, _ = torch_run(loaded, prompt, spec, torch_stop or should_stop)
    assert ours.sequences == theirs.sequences
    assert len(ours.sequences) == spec.num_return_sequences
    assert ours.scores == pytest.approx(theirs.scores, abs=1e-4)
    assert shape(ours.beam_tree) == shape(theirs.beam_tree)
    ours_scores = [n["score"] for step in ours.beam_tree for n in step]
    assert ours_scores == pytest.approx([n["score"] for step in theirs.beam_tree for n in step], abs=1e-4)
    assert emitted == [ours.sequences[0]]  # the best sequence arrives whole, once the search ends
    return ours


# the fast lane keeps several returned sequences under a length penalty; the full suite runs every case
@pytest.mark.parametrize(("which", "knobs"), fast_lane_keeps([
    ("llama", {"num_beams": 2}),
    ("llama", {"num_beams": 4, "num_return_sequences": 3, "length_penalty": 0.5, "cache": "dynamic"}),
    ("llama", {"num_beams": 3, "num_return_sequences": 2, "length_penalty": 1.5, "cache": "dynamic",
               "max_new_tokens": 140}),  # the cache grows from 128 to 192 positions under the search
    ("gemma", {"num_beams": 2, "num_return_sequences": 2, "length_penalty": 0.7}),
    ("gemma", {"num_beams": 4, "num_return_sequences": 2, "length_penalty": 2.0, "cache": "dynamic"}),
], keep=1))
def test_beam_search_matches_transformers(which, knobs):
    out = assert_same_search(model(which), beam(**knobs))
    assert out.extra["beam_candidates"] == 2 * knobs["num_beams"]  # one EOS id: 2K candidates per step
    if knobs.get("max_new_tokens") == 140:
        assert out.extra["cache_lengths"] == [128, 192]


@pytest.mark.parametrize(("which", "cache"), fast_lane_keeps([  # the fast lane: the sinks, which also re-rotate
    ("llama", {"cache": "sliding", "window": 6}),
    ("gemma", {"cache": "sliding"}),  # Gemma3's own window of 8
    ("llama", {"cache": "sink", "window": 12, "sink_tokens": 2})], keep=2))
def test_beam_over_a_bounded_cache_matches_the_pytorch_path(which, cache):
    """Past the window the rings wrap (and the sinks re-rotate) while their rows are reordered by beam."""
    out = assert_same_search(model(which), beam(num_beams=3, num_return_sequences=2,
                                                                  length_penalty=1.3, **cache))
    assert len(out.sequences[0]) == 24


@pytest.fixture(scope="module")
def eos_model():
    """A tiny Llama whose EOS is a token its beams reach early, so hypotheses finish along the way."""
    loaded = tiny_loaded("tiny-llama-eos", tiny_llama(seed=1))
    free, _ = torch_run(loaded, PROMPT, beam(num_beams=4))
    loaded.model.generation_config.eos_token_id = free.sequences[0][3]
    return loaded


# the fast lane keeps a processor and a length penalty over finished hypotheses; the full suite: every case
@pytest.mark.parametrize("knobs", fast_lane_keeps([{"early_stopping": False, "length_penalty": 1.0},
                                                   {"early_stopping": True, "length_penalty": 0.5},
                                                   {"early_stopping": False, "length_penalty": 2.0,
                                                    "repetition_penalty": 1.3},
                                                   {"min_new_tokens": 6, "length_penalty": 1.0}], keep=2))
def test_finished_hypotheses_eos_early_stopping_and_processors_match_transformers(eos_model, knobs):
    out = assert_same_search(eos_model, beam(num_beams=4, num_return_sequences=3, **knobs))
    assert any(n["finished"] for step in out.beam_tree[:-1] for n in step)  # EOS ended hypotheses on the way
    if not knobs.get("repetition_penalty"):  # (the penalty holds the EOS back once a beam has seen it)
        assert min(len(s) for s in out.sequences) < 24
    if "min_new_tokens" in knobs:
        assert min(len(s) for s in out.sequences) > knobs["min_new_tokens"]


def test_a_stop_finishes_the_search_as_transformers_does(llama):
    """The stop is read before each chunk on JAX and at each step on PyTorch: stopping before the second chunk
    (after 9 steps) is PyTorch's stop at its 10th step; both finish the best candidates of that step. The
    programs are compiled first: a stop is also read while a program compiles, and would end the run before
    its first chunk."""
    spec = beam(num_beams=2, length_penalty=0.5)
    jax_run(llama, PROMPT, spec.replace(backend="jax"))
    calls = {"jax": 0, "torch": 0}

    def stop(side: str, after: int):
        def should_stop() -> bool:
            calls[side] += 1
            return calls[side] >= after
        return should_stop

    out = assert_same_search(llama, spec, should_stop=stop("jax", 2),
                             torch_stop=stop("torch", 10))
    assert out.stopped and len(out.beam_tree) == 10 and len(out.sequences[0]) == 10


def test_the_tree_path_is_the_best_sequence_and_its_score(llama):
    spec = beam(backend="jax", num_beams=3, num_return_sequences=2, length_penalty=0.5)
    out, _ = jax_run(llama, PROMPT, spec)
    tree = out.beam_tree
    assert all(len(step) == 6 for step in tree) and len(tree) == 24  # 2K candidates per step
    for before, step in zip(tree, tree[1:], strict=False):  # every candidate extends a beam kept the step before
        assert all(n["parent"] is not None and before[n["parent"]]["kept"] for n in step)
    path = [next(n for n in step if n["chosen"]) for step in tree]
    assert [n["token"] for n in path] == out.sequences[0]
    assert path[-1]["score"] / len(path) ** 0.5 == pytest.approx(out.scores[0], abs=1e-5)


def test_a_repeated_beam_request_compiles_nothing(llama):
    spec = beam(backend="jax", num_beams=2, max_new_tokens=20)
    jax_run(llama, PROMPT, spec)
    first, _ = jax_run(llama, PROMPT, spec)
    # the knobs are traced and num_return_sequences is read on the host: changing them compiles nothing either
    again, _ = jax_run(llama, PROMPT, spec.replace(length_penalty=-0.5, early_stopping=True, num_return_sequences=2,
                                                   max_new_tokens=30))
    assert first.compile_s == again.compile_s == 0.0
    assert first.extra["compiled_programs"] == again.extra["compiled_programs"]


@pytest.mark.slow  # each cache's scoring programs: the fast lane's check that rows move with their beam is the
# bounded-cache parity above
@pytest.mark.parametrize("cache", [{"cache": "quantized", "cache_bits": 4, "residual_length": 4},
                                   {"cache": "sink", "window": 10, "sink_tokens": 3}])
def test_every_returned_score_is_its_sequence_scored_alone_over_the_same_cache(llama, cache):
    """A cache row gathered from the wrong beam would score a sequence with another hypothesis's keys: each
    returned score must be what a batch-1 pass over the same cache type gives its tokens (quantized stores and
    their scales, sinks and rings all move with their beam)."""
    spec = beam(backend="jax", num_beams=4, num_return_sequences=4, length_penalty=0.8, max_new_tokens=20, **cache)
    out, _ = jax_run(llama, PROMPT, spec)
    for tokens, score in zip(out.sequences, out.scores, strict=True):
        log_probs = jax_teacher_forced(llama, spec, PROMPT, tokens)
        alone = sum(float(log_probs[i, t]) for i, t in enumerate(tokens)) / len(tokens) ** 0.8
        assert score == pytest.approx(alone, abs=1e-3)


def test_a_jax_beam_column_gives_the_result_the_page_shows(tmp_path, monkeypatch):
    """Through the runner, as the page and the API call it: texts, scores and the beam tree (with each node's
    text) equal the PyTorch column's."""
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        spec = RunSpec(model=path, strategy="beam", num_beams=3, num_return_sequences=2, max_new_tokens=8,
                       chat=False)
        ours = runner.run_to_result("abc", spec.replace(backend="jax"))
        theirs = runner.run_to_result("abc", spec)
    assert ours["sequences"] == theirs["sequences"] and len(ours["sequences"]) == 2
    assert ours["scores"] == pytest.approx(theirs["scores"], abs=1e-4)
    assert shape(ours["beam_tree"]) == shape(theirs["beam_tree"])
    assert [n["text"] for step in ours["beam_tree"] for n in step] == [
        n["text"] for step in theirs["beam_tree"] for n in step]
    assert ours["metrics"]["tokens_per_s"] and ours["metrics"]["kv_cache_bytes"] > 0


def test_the_leading_beam_is_previewed_while_the_search_runs_on_both_backends(tmp_path, monkeypatch):
    """Beam search streams nothing, so the page shows its leading beam as it searches: PyTorch after every step,
    JAX after every device call, the same beams (the same search) until the result replaces them."""
    from playground.backends.jax.backend import JaxBackend
    from playground.backends.jax.strategy import STEPS_PER_CALL
    from playground.backends.torch.backend import TorchBackend

    spec = beam(num_beams=3, max_new_tokens=24, min_new_tokens=24)
    previews: dict[str, list[list[int]]] = {"torch": [], "jax": []}
    for backend in (TorchBackend(), JaxBackend()):
        backend.generate(model("llama"), PROMPT[0].tolist(), spec.replace(backend=backend.name), lambda ids: None,
                         lambda: False, preview=previews[backend.name].append)
    ours, theirs = previews["jax"], previews["torch"]
    assert [len(p) for p in theirs] == list(range(1, 25))  # one per step, each a token longer
    assert len(ours) >= 24 // STEPS_PER_CALL - 1 and all(p in theirs for p in ours)


def test_the_runner_turns_previews_into_hypothesis_events_before_the_result(tmp_path, monkeypatch):
    from playground.events import DoneEvent, HypothesisEvent

    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        events = list(runner.run("abc", RunSpec(model=path, strategy="beam", num_beams=2, max_new_tokens=8,
                                                min_new_tokens=8, chat=False)))
    hypotheses = [e for e in events if isinstance(e, HypothesisEvent)]
    assert [e.new_tokens for e in hypotheses] == list(range(1, 9))
    assert isinstance(events[-1], DoneEvent) and events.index(hypotheses[-1]) < len(events) - 1

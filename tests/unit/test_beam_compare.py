"""What a beam knob changed: finished hypotheses ranked under each column's length penalty, on a hand-made tree
and on transformers' and the JAX decoder's own beam searches over a tiny model that can stop early."""

import time

import pytest
import torch

from playground.result import build_result
from playground.spec import RunSpec
from playground.ui.beam_compare import (
    _quoted,
    beam_columns,
    beam_comparison,
    departures,
    excerpt,
    finished_hypotheses,
    returned_ranks,
)
from playground.ui.tokens import divergence_report, ordinal
from tests.helpers import jax_run, tiny_llama, tiny_loaded, torch_run

PROMPT = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 64, 5, 17, 42, 99, 3, 8, 9, 10]])


def _node(token, text, score, parent, finished=False, kept=False):
    return {"parent": parent, "token": token, "text": text, "score": score, "kept": kept, "finished": finished,
            "chosen": False}


# two beams (a parent is an index into the step before); step 2 finishes " a<eos>" (2 tokens, log-prob -2.0);
# step 4 ends " b c d e" by the length limit (-3.0)
TREE = [
    [_node(1, " a", -0.5, None, kept=True), _node(2, " b", -0.7, None, kept=True)],
    [_node(9, "<eos>", -2.0, 0, finished=True), _node(3, " c", -1.5, 1, kept=True), _node(4, " x", -2.2, 0, kept=True)],
    [_node(5, " d", -2.5, 1, kept=True), _node(6, " y", -4.0, 2, kept=True)],
    [_node(7, " e", -3.0, 0, finished=True), _node(8, " z", -5.0, 1, finished=True)],
]


def _result(length_penalty, scores, sequences):
    spec = RunSpec(strategy="beam", num_beams=2, num_return_sequences=2, max_new_tokens=4,
                   length_penalty=length_penalty).to_dict()
    return {"spec": spec, "prompt_tokens": 5, "beam_tree": TREE, "tokens": [], "scores": scores, "sequences": sequences,
            "token_ids": [1, 9] if sequences[0] == " a" else [2, 3, 5, 7]}


def test_finished_hypotheses_are_the_stopped_candidates_among_each_steps_best():
    found = finished_hypotheses(TREE, num_beams=2, max_new_tokens=4)
    assert [(h.tokens, h.text, h.length, h.log_prob, h.by_length_limit) for h in found] == [
        ((1, 9), " a", 2, -2.0, False), ((2, 3, 5, 7), " b c d e", 4, -3.0, True),
        ((1, 4, 6, 8), " a x y z", 4, -5.0, True)]
    assert len(finished_hypotheses(TREE, num_beams=1, max_new_tokens=4)) == 2  # " a x y z" was 2nd at its step


def test_a_length_penalty_reranks_the_same_hypotheses_and_the_table_says_which_each_column_returned():
    short_first = _result(-2.0, [-2.0 * 4, -3.0 * 16], [" a", " b c d e"])  # log-prob * length ** 2
    long_first = _result(2.0, [-3.0 / 16, -5.0 / 16], [" b c d e", " a x y z"])
    columns = beam_columns([short_first, long_first], ["1: beam", "2: beam"])
    assert [returned_ranks(c) for c in columns] == [{(1, 9): 1, (2, 3, 5, 7): 2}, {(2, 3, 5, 7): 1, (1, 4, 6, 8): 2}]
    table = beam_comparison([short_first, long_first], ["1: beam", "2: beam"])
    assert ("1: beam ranks <code class='hyp'>a</code> (2 tokens) first; 2: beam ranks <code class='hyp'>b c d e</code> "
            "(4 tokens) first") in table
    assert ("<code class='hyp'>a</code> + EOS | 2 | -2.00 | **-8.000 · ranks 1st, returned 1st** | -0.500 · ranks 3rd"
            in table)
    assert ("<code class='hyp'>a x y z</code> (length limit) | 4 | -5.00 | -80.000 · ranks 3rd | **-0.312 · ranks "
            "2nd, returned 2nd**") in table
    same = beam_comparison([short_first, short_first], ["1: beam", "2: beam"])
    assert "Every penalty ranks <code class='hyp'>a</code> (2 tokens) first" in same
    assert beam_comparison([short_first], ["1: beam"]) == ""  # nothing to compare


def test_columns_that_ran_different_searches_list_their_own_hypotheses_and_are_never_ranked_together():
    """Beam sampling on PyTorch against JAX: each search found other hypotheses, so no column gets ranks for a
    hypothesis its search never produced."""
    torch_column = _result(1.0, [-3.0 / 4, -2.0 / 2], [" b c d e", " a"])
    other_tree = [[_node(11, " q", -0.4, None, kept=True)], [_node(9, "<eos>", -1.0, 0, finished=True)]]
    jax_column = {**_result(1.0, [-1.0 / 2], [" q"]), "beam_tree": other_tree, "token_ids": [11, 9]}
    jax_column["spec"] = {**jax_column["spec"], "backend": "jax"}
    table = beam_comparison([torch_column, jax_column], ["1: beam", "2: beam · jax"])
    assert "ranks" not in table and "Every penalty" not in table
    assert "columns 1, 2 ran different searches" in table
    assert ("1st | **<code class='hyp'>b c d e</code> · 4 tokens · -0.750, returned 1st** | **<code class='hyp'>q"
            "</code> · 2 tokens · -0.500, returned 1st**") in table
    assert "2nd | **<code class='hyp'>a</code> · 2 tokens · -1.000, returned 2nd** | \n" in table
    # a third column of the first search is ranked with it; the JAX one stays apart
    rescored = _result(-1.0, [-2.0 * 2, -3.0 * 4], [" a", " b c d e"])
    both = beam_comparison([torch_column, jax_column, rescored], ["1: beam", "2: jax", "3: beam"])
    assert "(columns 1 and 3, one search: 3 finished hypotheses" in both and "column 2 ran a search of its own" in both
    named = beam_comparison([torch_column, rescored], ["1: beam · length penalty 1", "2: beam · length penalty -1"])
    assert "| 1: beam · length penalty 1 | 2: beam · length penalty -1\n" in named  # the name says it once
    assert "hypothesis | tokens | log-prob | 1: beam<br>length_penalty 1" in both


def test_hypotheses_that_share_their_start_and_end_are_shown_where_they_differ_with_the_whole_text_on_focus():
    start, end = "The sky is blue because of the way ", " interacts with Earth's atmosphere, it"
    texts = [start + "sunlight" + end, start + "light" + end]
    at = departures(texts)
    shown = [excerpt(t, a) for t, a in zip(texts, at, strict=True)]
    assert shown[0] != shown[1] and "sunlight" in shown[0] and "light" in shown[1]  # middle elision hid both
    cell = _quoted(texts[0], at[0])
    assert "tabindex='0'" in cell and f"title='{texts[0].replace(chr(39), '&#x27;')}'" in cell
    assert f"<span class='hyp-full'>{texts[0].replace(chr(39), '&#x27;')}</span>" in cell
    assert "&#124;" in _quoted("a | b") and "|" not in _quoted("a | b")  # a pipe cannot split the table


def test_a_large_score_is_matched_within_float32_rounding_and_an_absent_one_is_not():
    """At length_penalty -2 a score is the log-prob times the squared length: float32 rounding of a -579 score
    reached 7e-4 on SmolLM2, so the match is relative."""
    drifted = _result(-2.0, [-2.0 * 4 * (1 + 2e-6), -3.0 * 16 + 5.0], [" a", "not in the tree"])
    (column,) = beam_columns([drifted], ["1: beam"])
    assert returned_ranks(column) == {(1, 9): 1}


def test_the_divergence_line_of_two_beam_columns_with_one_best_text_names_what_differs():
    a = _result(-2.0, [-8.0, -48.0], [" a", " b c d e"])
    b = _result(0.5, [-2.0 / 2 ** 0.5, -3.0 / 2], [" a", " a x y z"])
    line = divergence_report([a, b], ["1: beam", "2: beam"])
    assert "identical (2 tokens); the returned sequences differ from the 2nd on" in line
    rescored = divergence_report([a, {**a, "scores": [-4.0, -48.0]}], ["1", "2"])
    assert "the same sequences returned, scored -8.000 against -4.000" in rescored


def test_ordinals():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd"]


@pytest.fixture(scope="module")
def stops_early():
    """A tiny model whose EOS is a token its beams write at once, so short and long hypotheses both finish."""
    return tiny_loaded("tiny-eos", tiny_llama(eos_token_id=105, pad_token_id=105))


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_every_returned_sequence_is_found_among_the_searchs_finished_hypotheses(stops_early, backend):
    """The table's length (new tokens, EOS included) and scores are the ones each backend's search used: every
    returned score is matched to one hypothesis of its own tree, and -2 against +2 puts different texts first."""
    results = []
    for length_penalty in (-2.0, 2.0):
        spec = RunSpec(strategy="beam", num_beams=3, num_return_sequences=3, max_new_tokens=8, backend=backend,
                       cache="static" if backend == "jax" else "dynamic", length_penalty=length_penalty)
        out = (jax_run if backend == "jax" else torch_run)(stops_early, PROMPT, spec)[0]
        results.append(build_result(spec, stops_early, PROMPT.shape[1], out, time.perf_counter(), 0.0, None))
    columns = beam_columns(results, ["1", "2"])
    assert all(sorted(returned_ranks(c).values()) == [1, 2, 3] for c in columns)
    firsts = [next(t for t, rank in returned_ranks(c).items() if rank == 1) for c in columns]
    assert len(firsts[0]) < len(firsts[1])  # -2 returns a short hypothesis first, +2 a long one
    assert "2 ranks" in beam_comparison(results, ["1", "2"])

"""The torch samplers transformers lacks (presence/frequency penalty, DRY, top-nσ, XTC) on hand-made logits rows."""

from __future__ import annotations

import math
from typing import cast

import pytest
import torch

from playground.backends.dry_breakers import breaker_ids
from playground.backends.torch.samplers import (
    DRYLogitsProcessor,
    PresenceFrequencyPenaltyLogitsProcessor,
    TopNSigmaLogitsWarper,
    XTCLogitsWarper,
)
from playground.registry.builtin_knobs import DRY_BREAKERS as DEFAULT_DRY_BREAKERS
from playground.registry.chain import parse_breakers
from tests.helpers import byte_tokenizer

INF = math.inf
NONE: frozenset[int] = frozenset()


def ids(*rows: list[int]) -> torch.LongTensor:
    return cast(torch.LongTensor, torch.tensor(rows, dtype=torch.long))


def row(*values: float) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.float32)


def penalised(processor, tokens: list[int], vocab: int = 12) -> dict[int, float]:
    """What `processor` takes off each token of a zero row after `tokens` (only the tokens it changes)."""
    out = processor(ids(tokens), torch.zeros((1, vocab)))
    return {token: -value for token, value in enumerate(out[0].tolist()) if value != 0}


# presence / frequency


def test_presence_and_frequency_count_only_the_generated_tokens():
    processor = PresenceFrequencyPenaltyLogitsProcessor(presence=0.5, frequency=0.25, prompt_length=3)
    scores = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    out = processor(ids([3, 3, 1, 2, 2, 4], [0, 0, 0, 5, 0, 5]), scores)
    # row 0: 3 and 1 are only in the prompt; 2 was generated twice, 4 once
    assert out[0].tolist() == [1.0, 1.0, 1.0 - (0.25 * 2 + 0.5), 1.0, 1.0 - (0.25 + 0.5), 1.0]
    # row 1: the prompt's three 0s do not count, the generated one does
    assert out[1].tolist() == [-(0.25 + 0.5), 0.0, 0.0, 0.0, 0.0, -(0.25 * 2 + 0.5)]


def test_negative_penalties_encourage_and_an_empty_generation_changes_nothing():
    processor = PresenceFrequencyPenaltyLogitsProcessor(presence=-1.0, frequency=-2.0, prompt_length=2)
    assert processor(ids([1, 2, 3]), torch.zeros((1, 4))).tolist() == [[0.0, 0.0, 0.0, 3.0]]
    assert processor(ids([1, 2]), torch.zeros((1, 4))).tolist() == [[0.0, 0.0, 0.0, 0.0]]


# DRY


def dry(allowed_length: int = 2, breakers: torch.Tensor | frozenset[int] = NONE, multiplier: float = 0.8,
        base: float = 1.75) -> DRYLogitsProcessor:
    return DRYLogitsProcessor(multiplier=multiplier, base=base, allowed_length=allowed_length, breakers=breakers)


def test_dry_penalises_the_token_that_would_continue_a_repeat():
    # "5 6" repeats "5 6" which was followed by 7: a match of 2 = allowed_length -> multiplier * base ** 0
    assert penalised(dry(), [5, 6, 7, 9, 5, 6]) == {7: pytest.approx(0.8)}


def test_dry_penalty_grows_with_the_match_length():
    assert penalised(dry(), [4, 5, 6, 7, 9, 4, 5, 6]) == {7: pytest.approx(0.8 * 1.75)}
    assert penalised(dry(), [3, 4, 5, 6, 7, 9, 3, 4, 5, 6]) == {7: pytest.approx(0.8 * 1.75**2)}


def test_dry_each_continuation_gets_its_longest_match():
    # 6 occurs twice before the end: "1 6" -> 7 (match 1) and "5 6" -> 8 (match 2)
    assert penalised(dry(allowed_length=1), [1, 6, 7, 5, 6, 8, 9, 5, 6]) == {
        7: pytest.approx(0.8), 8: pytest.approx(0.8 * 1.75)}
    # both earlier 6s are followed by 7: matches of 2 and 3, the longer counts
    assert penalised(dry(), [5, 6, 7, 4, 5, 6, 7, 0, 4, 5, 6]) == {7: pytest.approx(0.8 * 1.75)}
    assert penalised(dry(), [4, 5, 6, 7, 0, 5, 6, 7, 9, 4, 5, 6]) == {7: pytest.approx(0.8 * 1.75)}


def test_dry_matches_stop_at_50_tokens():
    period = list(range(1, 61))
    # the ending repeats 60 tokens, counted as 50: base ** (50 - 48), not base ** 12
    assert penalised(dry(allowed_length=48, multiplier=1.0, base=2.0), period * 2, vocab=64) == {
        1: pytest.approx(4.0)}


def test_dry_respects_allowed_length():
    assert penalised(dry(allowed_length=3), [5, 6, 7, 9, 5, 6]) == {}
    assert penalised(dry(allowed_length=1), [5, 6, 7, 9, 0, 6]) == {7: pytest.approx(0.8)}


def test_dry_leaves_a_row_ending_in_a_breaker_alone():
    assert penalised(dry(breakers=frozenset({6})), [5, 6, 7, 9, 5, 6]) == {}


def test_dry_does_not_penalise_a_breaker_as_the_next_token():
    assert penalised(dry(breakers=frozenset({7})), [5, 6, 7, 9, 5, 6]) == {}
    assert penalised(dry(breakers=frozenset({7})), [5, 6, 7, 5, 6, 8, 9, 5, 6]) == {8: pytest.approx(0.8)}


def test_dry_match_does_not_run_across_a_breaker():
    # without breakers: a match of 3; 5 a breaker: it stops at 1
    assert penalised(dry(allowed_length=1), [4, 5, 6, 7, 9, 4, 5, 6]) == {7: pytest.approx(0.8 * 1.75**2)}
    assert penalised(dry(allowed_length=1, breakers=frozenset({5})), [4, 5, 6, 7, 9, 4, 5, 6]) == {
        7: pytest.approx(0.8)}


def test_dry_breakers_as_a_tensor_and_rows_apart():
    processor = dry(breakers=torch.tensor([9]))
    out = processor(ids([5, 6, 7, 9, 5, 6], [5, 6, 7, 8, 5, 6]), torch.zeros((2, 12)))
    assert out[0, 7].item() == pytest.approx(-0.8) and out[1, 7].item() == pytest.approx(-0.8)
    assert out[:, [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]].eq(0).all()
    assert penalised(processor, [5, 6, 9, 1, 5, 6]) == {}  # the next token 9 is a breaker


def test_dry_with_multiplier_0_is_off():
    scores = torch.randn(1, 12)
    assert torch.equal(dry(multiplier=0.0)(ids([5, 6, 7, 9, 5, 6]), scores), scores)


def test_parse_breakers_reads_a_json_array_of_strings():
    assert parse_breakers(DEFAULT_DRY_BREAKERS) == ("\n", ":", '"', "*")
    assert parse_breakers("[]") == ()
    for bad in ["\\n", '"\\n"', "[1, 2]", '{"a": "b"}', '["a", null]', ""]:
        with pytest.raises(ValueError, match="must be a JSON list of non-empty strings") as caught:
            parse_breakers(bad)
        assert repr(bad) in str(caught.value)


class ListTokenizer:
    """A vocabulary of given texts; counts its decode calls."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.decodes = 0

    def __len__(self) -> int:
        return len(self.texts)

    def decode(self, token_ids: list[int]) -> str:
        self.decodes += 1
        return "".join(self.texts[token] for token in token_ids)


def test_breaker_ids_are_the_tokens_whose_text_contains_a_breaker_decoded_once_per_tokenizer():
    tokenizer = ListTokenizer(["a", "b\n", ":", "cd", "x*y", '"', "::"])
    assert breaker_ids(tokenizer, ("\n", "*")) == {1, 4}
    assert breaker_ids(tokenizer, parse_breakers(DEFAULT_DRY_BREAKERS)) == {1, 2, 4, 5, 6}
    assert tokenizer.decodes == 7
    assert breaker_ids(tokenizer, ()) == frozenset()
    tokenizer.texts.append("\n\n")  # an added token: the vocabulary is decoded again
    assert breaker_ids(tokenizer, ("\n",)) == {1, 7}


def test_breaker_ids_use_the_decoded_text_not_the_token_spelling():
    tokenizer = byte_tokenizer()  # byte-level: "\n" is spelled "Ċ"
    expected = set(tokenizer.encode('\n:"*', add_special_tokens=False))
    assert len(expected) == 4
    assert breaker_ids(tokenizer, parse_breakers(DEFAULT_DRY_BREAKERS)) == expected


# top-nσ


def test_top_n_sigma_keeps_what_lies_within_n_population_deviations_of_the_max():
    scores = row(0.0, 1.0, 2.0, 3.0, 4.0)  # mean 2, population deviation sqrt(2) (the sample one: sqrt(2.5))
    assert TopNSigmaLogitsWarper(1.0)(ids([0]), scores).tolist() == [[-INF, -INF, -INF, 3.0, 4.0]]
    # 4 - 2 sqrt(2) = 1.17 cuts 1; 4 - 2 sqrt(2.5) = 0.84 would keep it
    assert TopNSigmaLogitsWarper(2.0)(ids([0]), scores).tolist() == [[-INF, -INF, 2.0, 3.0, 4.0]]
    assert TopNSigmaLogitsWarper(3.0)(ids([0]), scores).tolist() == [[0.0, 1.0, 2.0, 3.0, 4.0]]


def test_top_n_sigma_ignores_minus_inf_entries():
    scores = row(-INF, 0.0, 1.0, -INF, 2.0, 3.0, 4.0, -INF)
    assert TopNSigmaLogitsWarper(2.0)(ids([0]), scores).tolist() == [[-INF, -INF, -INF, -INF, 2.0, 3.0, 4.0, -INF]]


def test_top_n_sigma_rows_apart_and_degenerate_rows():
    scores = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0], [-INF, 5.0, -INF, -INF, -INF], [-INF] * 5])
    out = TopNSigmaLogitsWarper(1.0)(ids([0], [0], [0]), scores)
    assert out.tolist() == [[-INF, -INF, -INF, 3.0, 4.0], [-INF, 5.0, -INF, -INF, -INF], [-INF] * 5]


# XTC


def logs(*probabilities: float) -> torch.Tensor:
    return row(*(math.log(p) for p in probabilities))


def test_xtc_keeps_the_least_likely_of_the_tokens_above_the_threshold():
    out = XTCLogitsWarper(threshold=0.15, probability=1.0)(ids([0]), logs(0.4, 0.3, 0.2, 0.1))
    assert out[0, :2].tolist() == [-INF, -INF]
    assert out[0, 2:].tolist() == pytest.approx([math.log(0.2), math.log(0.1)])


def test_xtc_in_vocabulary_order_and_rows_apart():
    scores = torch.cat([logs(0.1, 0.4, 0.2, 0.3), logs(0.3, 0.3, 0.2, 0.2), logs(0.7, 0.1, 0.1, 0.1)])
    out = XTCLogitsWarper(threshold=0.15, probability=1.0)(ids([0], [0], [0]), scores)
    assert torch.isinf(out).tolist() == [
        [False, True, False, True],  # 0.4 and 0.3 go, 0.2 is the least likely above 0.15
        [True, True, True, False],  # all four pass: the later 0.2 is last in the stable descending order
        [False, False, False, False],  # only 0.7 passes
    ]


def test_xtc_does_nothing_when_fewer_than_two_pass():
    scores = logs(0.4, 0.3, 0.2, 0.1)
    assert torch.equal(XTCLogitsWarper(threshold=0.35, probability=1.0)(ids([0]), scores), scores)
    assert torch.equal(XTCLogitsWarper(threshold=0.5, probability=1.0)(ids([0]), scores), scores)


def seed_whose_coin(acts: bool, probability: float) -> int:
    """A seed whose first torch.rand(()) says XTC acts (u <= probability) or not."""
    for seed in range(1000):
        torch.manual_seed(seed)
        if (float(torch.rand(())) <= probability) is acts:
            return seed
    raise AssertionError("no such seed")


def test_xtc_does_nothing_when_the_coin_says_so():
    warper = XTCLogitsWarper(threshold=0.15, probability=0.5)
    scores = logs(0.4, 0.3, 0.2, 0.1)
    torch.manual_seed(seed_whose_coin(False, 0.5))
    assert torch.equal(warper(ids([0]), scores), scores)
    torch.manual_seed(seed_whose_coin(True, 0.5))
    assert torch.isinf(warper(ids([0]), scores)).tolist() == [[True, True, False, False]]


def test_xtc_is_reproducible_under_a_seed_and_draws_one_number_per_call():
    warper = XTCLogitsWarper(threshold=0.15, probability=0.5)
    scores = logs(0.4, 0.3, 0.2, 0.1)

    def run() -> tuple[list[bool], float]:
        torch.manual_seed(7)
        acted = [bool(torch.isinf(warper(ids([0]), scores)).any()) for _ in range(20)]
        return acted, float(torch.rand(()))

    acted, after = run()
    assert run() == (acted, after)
    assert True in acted and False in acted
    torch.manual_seed(7)
    coins = torch.rand(21)
    assert acted == (coins[:20] <= 0.5).tolist() and after == float(coins[20])


# arguments and inputs


@pytest.mark.parametrize(("build", "name", "value"), [
    (lambda: PresenceFrequencyPenaltyLogitsProcessor(True, 0.0, 0), "presence", True),
    (lambda: PresenceFrequencyPenaltyLogitsProcessor(0.0, math.nan, 0), "frequency", math.nan),
    (lambda: PresenceFrequencyPenaltyLogitsProcessor(0.0, 0.0, -1), "prompt_length", -1),
    (lambda: PresenceFrequencyPenaltyLogitsProcessor(0.0, 0.0, 1.5), "prompt_length", 1.5),
    (lambda: DRYLogitsProcessor(-0.1, 1.75, 2, NONE), "multiplier", -0.1),
    (lambda: DRYLogitsProcessor(0.8, 1.0, 2, NONE), "base", 1.0),
    (lambda: DRYLogitsProcessor(0.8, 11.0, 2, NONE), "base", 11.0),
    (lambda: DRYLogitsProcessor(0.8, 1.75, 0, NONE), "allowed_length", 0),
    (lambda: DRYLogitsProcessor(0.8, 1.75, 51, NONE), "allowed_length", 51),
    (lambda: DRYLogitsProcessor(0.8, 1.75, 2, [1, 2]), "breakers", [1, 2]),
    (lambda: TopNSigmaLogitsWarper(0.0), "n", 0.0),
    (lambda: TopNSigmaLogitsWarper(-1.0), "n", -1.0),
    (lambda: TopNSigmaLogitsWarper(math.nan), "n", math.nan),
    (lambda: XTCLogitsWarper(0.0, 0.5), "threshold", 0.0),
    (lambda: XTCLogitsWarper(0.6, 0.5), "threshold", 0.6),
    (lambda: XTCLogitsWarper(0.1, 0.0), "probability", 0.0),
    (lambda: XTCLogitsWarper(0.1, 1.5), "probability", 1.5),
    (lambda: XTCLogitsWarper(0.1, True), "probability", True),
])
def test_constructors_refuse_bad_values_naming_the_argument(build, name, value):
    with pytest.raises(ValueError, match=f"^{name} must") as caught:
        build()
    assert repr(value) in str(caught.value)


@pytest.mark.parametrize("processor", [
    PresenceFrequencyPenaltyLogitsProcessor(0.5, 0.5, 2),
    DRYLogitsProcessor(0.8, 1.75, 2, NONE),
    TopNSigmaLogitsWarper(1.0),
    XTCLogitsWarper(0.15, 1.0),
], ids=lambda processor: type(processor).__name__)
def test_inputs_are_not_modified(processor):
    input_ids = ids([5, 6, 1, 9, 5, 6], [2, 3, 1, 3, 2, 2])
    scores = torch.cat([logs(0.05, 0.3, 0.1, 0.05, 0.05, 0.05, 0.2, 0.2), logs(*[0.125] * 8)])
    before_ids, before_scores = input_ids.clone(), scores.clone()
    out = processor(input_ids, scores)
    assert not torch.equal(out, scores)  # it acted
    assert torch.equal(input_ids, before_ids) and torch.equal(scores, before_scores)

"""Text-quality measures of a sweep's rows, on token ids: computed locally, no other model needed.

- distinct-n: distinct n-grams / n-grams in one output (Li et al., 2016); 1.0 means nothing repeats.
- repeated 4-gram rate: the share of 4-grams that already occurred earlier in the same output (degeneration).
- agreement (the agreed prefix): the share of the reference's tokens (the greedy, full-precision, dynamic-cache
  output of the same prompt) that an output reproduces before its first difference from it, and the position of
  that difference (None when the two are equal). Counted up to the first difference only: past it the two texts
  condition on different tokens, so matching positions there are chance (an output one token out of step with
  the reference matches almost nowhere, one that has drifted onto a common word matches by luck).
- self-similarity: across the seeds of one prompt, the mean over pairs of outputs of 2·LCS / (len(a) + len(b)),
  LCS the longest common subsequence of their token ids (1.0: the samples are the same; 0.0: no token in common).
  An alignment: a sample that inserts or drops a token and then goes on as the other still counts what it shares.
- returned overlap: the same mean pairwise overlap across the sequences one beam-type run returns, on their words
  (the Result keeps returned sequences as text): how alike diverse beam search's groups end up.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations


def ngrams(ids: Sequence[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]


def distinct_n(ids: Sequence[int], n: int) -> float | None:
    """Distinct n-grams over all n-grams; None for an output shorter than n."""
    grams = ngrams(ids, n)
    return len(set(grams)) / len(grams) if grams else None


def repeated_ngram_rate(ids: Sequence[int], n: int = 4) -> float | None:
    """The share of n-grams seen before in the same output; None for an output shorter than n."""
    grams = ngrams(ids, n)
    if not grams:
        return None
    seen: set[tuple[int, ...]] = set()
    repeated = 0
    for gram in grams:
        repeated += gram in seen
        seen.add(gram)
    return repeated / len(grams)


def first_difference(ids: Sequence[int], reference: Sequence[int]) -> int | None:
    """The first position where the two differ (where the shorter ends, when one is a prefix of the other);
    None when they are equal."""
    first = next((i for i, (a, b) in enumerate(zip(ids, reference, strict=False)) if a != b), None)
    if first is None and len(ids) != len(reference):
        first = min(len(ids), len(reference))
    return first


def agreement(ids: Sequence[int], reference: Sequence[int]) -> tuple[float, int | None]:
    """(share of the reference's tokens that `ids` reproduces before its first difference, that position or None).

    An output longer than the reference that starts with all of it reproduces all of it (1.0)."""
    first = first_difference(ids, reference)
    if not reference:
        return (1.0 if not ids else 0.0), first
    matched = len(reference) if first is None else min(first, len(reference))
    return matched / len(reference), first


def lcs_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common subsequence of two id lists: the bit-parallel algorithm of Allison and Dix
    (1986) in Hyyrö's form, a bit of one Python integer per position of `a`, so 1024 x 1024 ids take a
    millisecond or so instead of a million-cell table."""
    if not a or not b:
        return 0
    positions: dict[int, int] = {}
    for i, token in enumerate(a):
        positions[token] = positions.get(token, 0) | (1 << i)
    full = (1 << len(a)) - 1
    row = full  # bit i set: position i of `a` is not yet matched on the way to the longest subsequence
    for token in b:
        matches = row & positions.get(token, 0)
        row = ((row + matches) | (row - matches)) & full
    return len(a) - row.bit_count()


def overlap(a: Sequence[int], b: Sequence[int]) -> float:
    """2·LCS / (len(a) + len(b)): 1.0 for equal lists (two empty ones included), 0.0 with no token in common."""
    return 2 * lcs_length(a, b) / (len(a) + len(b)) if a or b else 1.0


def self_similarity(samples: Sequence[Sequence[int]]) -> float | None:
    """The mean overlap (2·LCS / total length) over pairs of samples; None with fewer than two samples."""
    pairs = list(combinations(samples, 2))
    if not pairs:
        return None
    return sum(overlap(a, b) for a, b in pairs) / len(pairs)


def returned_overlap(texts: Sequence[str]) -> float | None:
    """The mean pairwise 2·LCS / total length of the returned sequences' words; None with fewer than two."""
    vocabulary: dict[str, int] = {}
    words = [[vocabulary.setdefault(word, len(vocabulary)) for word in text.split()] for text in texts]
    return self_similarity(words)

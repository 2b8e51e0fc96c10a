"""Text-quality measures of a sweep's rows, on token ids: computed locally, no other model needed.

- distinct-n: distinct n-grams / n-grams in one output (Li et al., 2016); 1.0 means nothing repeats.
- repeated 4-gram rate: the share of 4-grams that already occurred earlier in the same output (degeneration).
- agreement: the share of positions where an output has the reference's token (the greedy, full-precision,
  dynamic-cache output of the same prompt), over the reference's length, and the first position where they
  differ (None when one is a prefix of the other and they have the same length).
- self-similarity: across the seeds of one prompt, the mean pairwise Jaccard overlap of the outputs' sets of
  distinct 2-grams (1.0: every sample the same; lower: samples differ from each other).
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


def agreement(ids: Sequence[int], reference: Sequence[int]) -> tuple[float, int | None]:
    """(share of the reference's positions holding the same token, first differing position or None)."""
    if not reference:
        return (1.0 if not ids else 0.0), (None if not ids else 0)
    same = sum(a == b for a, b in zip(ids, reference, strict=False))
    first = next((i for i, (a, b) in enumerate(zip(ids, reference, strict=False)) if a != b), None)
    if first is None and len(ids) != len(reference):
        first = min(len(ids), len(reference))
    return same / len(reference), first


def self_similarity(samples: Sequence[Sequence[int]]) -> float | None:
    """Mean pairwise Jaccard overlap of distinct 2-grams; None with fewer than two samples."""
    sets = [set(ngrams(s, 2)) for s in samples]
    pairs = list(combinations(sets, 2))
    if not pairs:
        return None
    return sum(len(a & b) / len(a | b) if a | b else 1.0 for a, b in pairs) / len(pairs)

"""What a cache loses over a long text: teacher-forced through the cache, against the full cache on the same backend.

Both read the first N tokens of the text; at every position but the last each gives the distribution of the next
token. The full cache is the dynamic cache (every position in full precision); the cache under test shows the
model at each position what decoding would show it there (backends' `logprobs_through_cache`). Per position:
the cache's negative log-likelihood of the real next token, KL(full || cache) in nats, and whether the two agree
on the most likely token (llama.cpp's `--kl-divergence` figures). Reported overall and per bucket of positions,
so a window's collapse once it fills shows where it starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from playground.context.request import MeasureStopped, never
from playground.generation_slot import Holder, held_pieces
from playground.models.loaded import LoadedModel
from playground.runner import GENERATION_LOCK, backend_for
from playground.spec import RunSpec

FULL_CACHE = "dynamic"  # the reference: every position kept in full precision, stored in fp32
FULL_STORE = "fp32"
BUCKETS = 8  # buckets of positions reported by default
CHUNK = 128  # positions per call through a cache: bounds the (chunk, vocabulary) log-probabilities held at once
# the full cache's rows of log-probabilities for one model, backend and text, kept so that several caches measured
# in one run (the page's tab) teacher-force the reference once rather than once per cache
References = dict[tuple[Any, ...], list[torch.Tensor]]


@dataclass
class Positions:
    """Per predicted position (the token at position p + 1 read after positions 0..p): the figures compared."""

    nll: list[np.ndarray] = field(default_factory=list)  # the cache's -log p(next token), nats
    kl: list[np.ndarray] = field(default_factory=list)  # KL(full || cache), nats
    top1: list[np.ndarray] = field(default_factory=list)  # the two agree on the most likely token

    def add(self, full: torch.Tensor, mine: torch.Tensor, targets: torch.Tensor) -> None:
        """Rows of log-probabilities (C, V) from both caches at the same positions, and the tokens that came next."""
        self.nll.append((-mine.gather(1, targets[:, None])[:, 0]).double().numpy())
        # a token the full model gives no mass adds nothing (0 * -inf would be nan)
        terms = torch.where(full > -math.inf, full.exp() * (full - mine), torch.zeros_like(full))
        self.kl.append(terms.sum(-1).double().clamp_min(0).numpy())  # rounding can dip a hair below 0
        self.top1.append((full.argmax(-1) == mine.argmax(-1)).numpy())

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.concatenate(self.nll), np.concatenate(self.kl), np.concatenate(self.top1)


def figures(nll: np.ndarray, kl: np.ndarray, top1: np.ndarray) -> dict[str, float]:
    """Perplexity, mean KL from the full cache and the top-1 agreement of some positions."""
    return {"ppl": round(float(np.exp(nll.mean())), 4), "kl_vs_full": float(f"{kl.mean():.6g}"),
            "top1_vs_full": round(float(top1.mean()), 4)}


def summarize(positions: Positions, tokens: int, buckets: int = BUCKETS) -> dict[str, Any]:
    """The quality JSON: overall, then per bucket of predicted positions [start, end) (positions 1 .. tokens - 1,
    split as evenly as they go)."""
    nll, kl, top1 = positions.arrays()
    edges = np.linspace(0, len(nll), min(buckets, len(nll)) + 1).round().astype(int)
    rows = [{"start": int(a) + 1, "end": int(b) + 1, **figures(nll[a:b], kl[a:b], top1[a:b])}
            for a, b in zip(edges, edges[1:], strict=False)]
    return {"tokens": tokens, **figures(nll, kl, top1), "buckets": rows}


def paired(first: Iterator[torch.Tensor], second: Iterator[torch.Tensor]) -> Iterator[tuple[torch.Tensor,
                                                                                             torch.Tensor]]:
    """Two streams of rows cut into chunks of different sizes, as pieces of equal length side by side."""
    left, right = torch.empty(0), torch.empty(0)
    while True:
        try:
            while len(left) == 0:
                left = next(first)
            while len(right) == 0:
                right = next(second)
        except StopIteration:
            return
        n = min(len(left), len(right))
        yield left[:n], right[:n]
        left, right = left[n:], right[n:]


def measure_quality(loaded: LoadedModel, spec: RunSpec, ids: list[int], progress: Callable[[str], Any],
                    buckets: int = BUCKETS, chunk: int = CHUNK, should_stop: Callable[[], bool] = never,
                    references: References | None = None, holder: Holder | None = None) -> dict[str, Any]:
    """Teacher-force the token `ids` through spec's cache and the full cache on spec's backend; the quality JSON.
    The full cache's rows come from `references` when an earlier call over the same model, backend and tokens left
    them there (and are left there once read to the end). Raises MeasureStopped when `should_stop` says so between
    pieces. Each chunk of either pass holds the generation slot as a piece of `holder`'s work, so a short request
    waits at most one chunk."""
    backend = backend_for(spec.backend)
    holder = holder or Holder("a context measure", yields=True)

    def chunks(rows: Iterator[torch.Tensor]) -> Iterator[torch.Tensor]:
        return held_pieces(rows, GENERATION_LOCK, holder, progress)

    tokens = len(ids)

    def preparing(fraction: float, message: str) -> None:  # a compile, the quantized cache's kernels
        progress(message)

    full_spec = spec.replace(cache=FULL_CACHE, cache_dtype=FULL_STORE)
    full = chunks(_reference_rows(references, (spec.model, spec.backend, spec.weights, spec.devices, tuple(ids),
                                               chunk),
                                  lambda: backend.logprobs_through_cache(loaded, full_spec, ids, chunk, preparing)))
    if spec == full_spec:  # the cache under test is the reference: one pass serves both
        pairs: Iterator[tuple[torch.Tensor, torch.Tensor]] = ((rows, rows) for rows in full)
    else:
        mine = chunks(backend.logprobs_through_cache(loaded, spec, ids, chunk, preparing))
        pairs = paired(full, mine)
    positions, done = Positions(), 0
    for reference, rows in pairs:
        if should_stop():
            raise MeasureStopped(f"stopped after {done} of {tokens - 1} positions")
        targets = torch.tensor(ids[done + 1: done + 1 + len(rows)])
        positions.add(reference, rows, targets)
        done += len(rows)
        progress(f"quality: {done}/{tokens - 1} positions through the {spec.cache} and {FULL_CACHE} caches")
    return summarize(positions, tokens, buckets)


def _reference_rows(references: References | None, key: tuple[Any, ...],
                    compute: Callable[[], Iterator[torch.Tensor]]) -> Iterator[torch.Tensor]:
    """The full cache's rows: those kept under `key`, or computed and kept once every row has been read."""
    if references is None:
        yield from compute()
        return
    if key in references:
        yield from references[key]
        return
    rows: list[torch.Tensor] = []
    for row in compute():
        rows.append(row)
        yield row
    references[key] = rows  # only a reference read to the end is kept: a stopped pass leaves nothing half-done

"""The PyTorch model's next-token log-probabilities along a text, read through a run's own Cache object: at each
position the model sees what generation would show it there (a sliding cache its window, a sink cache its sinks
and window, a quantized cache its quantized store), so the cost of a cache's evictions and rounding can be
measured against the full cache.

Where a cache gives the same attention whether the tokens arrive one at a time or many per forward, the text goes
through in chunks: the caches that keep every position in full precision (dynamic, static), and the sliding cache,
whose window travels into a multi-token forward's mask (caches/sliding.py; a test holds chunks equal to steps).
Every other cache steps one token at a time, as decoding does: a chunk would see what a single step would not (the
quantized layer attends over a new chunk in full precision, the sink cache over a long chunk with a plain causal
mask), and so would a cache registered later, until it is shown to be exact in chunks.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from playground import registry
from playground.backends.base import ReportProgress
from playground.backends.torch.caches.factory import make_cache
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec

# caches beside those without a retention rule whose attention is the same in chunks as in single steps
EXACT_IN_CHUNKS = frozenset({"sliding"})


def steps_one_at_a_time(spec: RunSpec) -> bool:
    """Whether this cache must see the text one token at a time to show each position what decoding would."""
    return registry.cache_type(spec.cache).retention is not None and spec.cache not in EXACT_IN_CHUNKS


def logprobs_through_cache(loaded: LoadedModel, spec: RunSpec, ids: torch.Tensor, chunk: int,
                           progress: ReportProgress | None = None) -> Iterator[torch.Tensor]:
    """Log-probabilities (rows, V) of the token after each position of `ids` (1, N) but the last, `chunk` rows at
    a time (the last chunk may be shorter), through a fresh cache of spec's type sized for the text."""
    model = loaded.model
    prepare = registry.cache_type(spec.cache).prepare.get("torch")
    if prepare is not None:  # the quantized cache's kernels, built once per process
        prepare(spec, progress)
    ids = ids.to(model.device)
    cache = make_cache(spec, model, ids.shape[1])
    one_by_one = steps_one_at_a_time(spec)
    for start in range(0, ids.shape[1] - 1, chunk):
        # inference mode is entered and left around each chunk, never held across a yield: it is thread-wide
        # state, and two of these generators read side by side (the full cache and the one measured) would
        # leave and re-enter it out of order, leaving the whole process in inference mode afterwards
        with torch.inference_mode():
            piece = ids[:, start: min(start + chunk, ids.shape[1] - 1)]  # (1, C)
            if one_by_one:
                logits = torch.cat([model(piece[:, i: i + 1], past_key_values=cache, use_cache=True).logits[0]
                                    for i in range(piece.shape[1])])
            else:
                logits = model(piece, past_key_values=cache, use_cache=True).logits[0]  # (C, V)
            rows = torch.log_softmax(logits.float(), dim=-1).cpu()
        yield rows.clone()  # (C, V), an ordinary tensor: the caller computes with it outside inference mode

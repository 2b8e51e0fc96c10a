"""How far a warm run on a restored cache (restored_reuse.py) is from the cold run of the same tokens.

A quantized store continued over a new suffix is re-quantized at other points than a single prefill's, and a
sliding or sink cache continued over a suffix attends over its kept window where a whole prompt attends over
itself, so a warm run of these caches need not give the cold run's probabilities. Rather than claim either way, a
warm run is measured after it finishes (outside its timings): the model's next-token distribution at each new
token, once through a second copy of the restored entry fed the suffix (as the warm run was) and once through a
fresh cache fed the whole prompt (as a cold run is, in the same prefill chunks), each then stepping through the
run's own tokens one at a time, as decoding does. Until the first token where the two disagree on the most likely
token, the cold side is exactly what a cold greedy run computes; a sampling run's comparison is of the same
distributions (the model's own, at temperature 1, before any processor).

It costs a cold prefill and one decode step per new token, beside the warm run; the exact caches are not measured
(their tests hold warm to cold within 1e-5).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Cache

from playground.backends.torch import prefill
from playground.backends.torch.caches.factory import make_cache
from playground.backends.warm_vs_cold import compare
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


def next_logprobs(model: Any, cache: Cache, first: torch.Tensor, then: list[int],
                  chunk: int | None = None) -> torch.Tensor:
    """(1 + len(then), V) log-probabilities of the token after `first` (1, T), fed in chunks of `chunk`
    (None: whole), and after each id of `then`, fed one at a time, through `cache`."""
    rows = []
    with torch.inference_mode():
        step = chunk or first.shape[1]
        for start in range(0, first.shape[1], step):
            logits = model(first[:, start: start + step], past_key_values=cache, use_cache=True).logits  # (1, C, V)
        rows.append(logits[0, -1:])
        for token in then:
            one = torch.tensor([[token]], device=first.device)  # (1, 1)
            rows.append(model(one, past_key_values=cache, use_cache=True).logits[0, -1:])
        # float64: a KL near 0 is not lost in float32's rounding of the log-probabilities
        return torch.log_softmax(torch.cat(rows).double(), dim=-1).cpu()  # (N, V)


def against_cold(loaded: LoadedModel, spec: RunSpec, warm_cache: Cache, prompt: torch.Tensor, shared: int,
                 tokens: list[int]) -> dict[str, Any] | None:
    """The warm run's distributions (through `warm_cache`, the entry restored at `shared` tokens) against the cold
    run's, at each of the run's new `tokens`; None for a run that made none."""
    if not tokens:
        return None
    model, length = loaded.model, prompt.shape[1]
    warm = next_logprobs(model, warm_cache, prompt[:, shared:], tokens[:-1])
    cold = next_logprobs(model, make_cache(spec, model, length), prompt, tokens[:-1],
                         prefill.chunk_size(spec, length))
    return compare(warm.numpy(), cold.numpy())

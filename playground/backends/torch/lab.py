"""The sampler lab on PyTorch: a distribution typed by hand through the run's logits chain, one stage at a time
(playground/sampler_lab.py asks for it and reads the result)."""

from __future__ import annotations

import numpy as np
import torch

from playground.backends.torch.chain import TorchContext, processors
from playground.spec import RunSpec


def stage_logits(spec: RunSpec, logits: np.ndarray, history: tuple[int, ...], names: tuple[str, ...],
                 breakers: frozenset[int]) -> list[np.ndarray]:
    """(V,) logits after each stage of `spec`'s chain named in `names` (in the chain's order), -inf where
    removed. The history is the text generated so far (an empty prompt); a random stage draws from torch's
    generator seeded with the spec's seed."""
    context = TorchContext(0, (), None, torch.device("cpu"), breakers=breakers)
    ids = torch.tensor([list(history)], dtype=torch.long)  # (1, H)
    scores = torch.from_numpy(np.asarray(logits, np.float32)).clone()[None, :]  # (1, V)
    torch.manual_seed(spec.seed)
    outputs = []
    for name, processor in processors(spec, context):
        scores = processor(ids, scores)
        if name in names:
            outputs.append(scores[0].numpy().copy())
    return outputs

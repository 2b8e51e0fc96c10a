"""Each prompt token's log-probability given the tokens before it, and the model's most likely tokens there: a
teacher-forced forward over the prompt (what `echo` with `logprobs` reports, and log-likelihood evaluations read)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

CHUNK = 256  # positions per forward: bounds the logits held at once (256 x a 262k vocabulary is 268 MB in fp32)


@dataclass(frozen=True)
class PromptLogprobs:
    """Per prompt token after the first (which nothing predicts): its log-probability and the `top` most likely
    tokens at its position as (id, log-probability), under the model's own softmax at temperature 1."""

    logprobs: list[float]
    top: list[list[tuple[int, float]]]


def prompt_logprobs(model: Any, prompt_ids: Sequence[int], top: int) -> PromptLogprobs:
    """One causal pass over the token ids in chunks of CHUNK positions through a dynamic cache (full attention)."""
    ids = torch.tensor([list(prompt_ids)], device=model.device)  # (1, T)
    cache = DynamicCache(config=model.config)
    chosen: list[torch.Tensor] = []
    best_lp: list[torch.Tensor] = []
    best_ids: list[torch.Tensor] = []
    with torch.inference_mode():
        for start in range(0, ids.shape[1] - 1, CHUNK):
            piece = ids[:, start:start + CHUNK]  # (1, C)
            out = model(piece, past_key_values=cache, use_cache=True)
            log_probs = torch.log_softmax(out.logits[0].float(), dim=-1)  # (C, V)
            targets = ids[0, start + 1:start + 1 + piece.shape[1]]  # the next token of each position: (C',)
            log_probs = log_probs[:targets.shape[0]]
            chosen.append(log_probs.gather(1, targets[:, None])[:, 0].cpu())
            values, indices = torch.topk(log_probs, top) if top else (log_probs[:, :0], log_probs[:, :0].long())
            best_lp.append(values.cpu())
            best_ids.append(indices.cpu())
    if not chosen:
        return PromptLogprobs([], [])
    lps, top_lp, top_ids = torch.cat(chosen), torch.cat(best_lp), torch.cat(best_ids)
    return PromptLogprobs([float(x) for x in lps],
                          [list(zip(map(int, i), map(float, v), strict=True)) for i, v in zip(top_ids, top_lp,
                                                                                               strict=True)])

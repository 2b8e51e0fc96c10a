"""The full-precision reference: plain transformers generate (what the other paths must match) and a teacher-forced
judgement of any output under the fp32 model (what a cheaper setting costs in quality)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.generation.streamers import BaseStreamer


def reference_greedy(model: Any, ids: torch.Tensor, new_tokens: int, cache_implementation: str = "dynamic",
                     streamer: BaseStreamer | None = None, **kwargs: Any) -> list[int]:
    """Exactly `new_tokens` greedy tokens from plain transformers generate, none of our processors or caches:
    the reference the other paths must match (tests) and are timed against (bench). `cache_implementation` is
    transformers' own ("dynamic" or "static")."""
    ids = ids.to(model.device)
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, streamer=streamer, cache_implementation=cache_implementation,
                             **kwargs)
    return list(out[0, ids.shape[1]:].tolist())


@dataclass(frozen=True)
class Judgement:
    """An output read by the full-precision model with its dynamic cache."""

    mean_logprob: float | None  # mean log-probability per generated token, in nats (None: nothing generated)
    greedy_divergence: int | None  # first token where greedy decoding would have chosen otherwise; None: never
    log_probs: torch.Tensor | None = field(default=None, repr=False, compare=False)  # (N, V) the model's, per token


def logprobs_along(model: Any, prompt_ids: torch.Tensor, new_ids: list[int]) -> torch.Tensor:
    """Log-probabilities (N, V) of the distribution each new token came from, in one forward pass over prompt +
    output (no cache: full attention). Only the last N + 1 positions go through the head: the prompt's other rows
    of (T, V) logits would cost 8.5 GB and most of the time for an 8k-token prompt on Gemma-3's 262k vocabulary."""
    ids = torch.cat([prompt_ids, torch.tensor([new_ids], dtype=prompt_ids.dtype)], dim=1).to(model.device)  # (1, T+N)
    keep = len(new_ids) + 1
    with torch.inference_mode():
        out = model(ids, attention_mask=torch.ones_like(ids), logits_to_keep=keep)
    return torch.log_softmax(out.logits[0, -keep:-1].float(), dim=-1).cpu()  # judged on the host


def mean_kl(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Mean over rows of KL(reference || other) in nats, both log-probabilities (N, V)."""
    return float((reference.exp() * (reference - other)).sum(-1).mean())


def judge(model: Any, prompt_ids: list[int], new_ids: list[int]) -> Judgement:
    """One forward pass over prompt + output. Up to the first token greedy would not have chosen, the output *is*
    the greedy reference, so the first position whose token is not the argmax is where it leaves greedy."""
    if not new_ids:
        return Judgement(None, None)
    log_probs = logprobs_along(model, torch.tensor([prompt_ids]), new_ids)
    chosen = torch.tensor(new_ids)
    mean = float(log_probs.gather(1, chosen[:, None]).mean())
    differs = torch.nonzero(log_probs.argmax(dim=-1) != chosen)
    return Judgement(round(mean, 5), int(differs[0, 0]) if len(differs) else None, log_probs)

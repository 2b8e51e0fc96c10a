"""Per-token probability, entropy and top alternatives, recorded during generate without changing it."""

from __future__ import annotations

from typing import Any, cast

import torch
from transformers import LogitsProcessor, StoppingCriteria

from playground.backends.base import TOP_ALTERNATIVES, TokenInfo
from playground.kv.factory import kv_bytes


class TokenProbe(LogitsProcessor):
    """Sees the final scores of each step (after temperature/top-k/top-p, which run before it).

    The chosen token is only known at the next call (it is the last of `input_ids` then), so each step's
    distribution is held until then; `finish` resolves the last one. Returns the scores untouched.
    """

    def __init__(self) -> None:
        self.records: list[TokenInfo] = []
        self._pending: torch.Tensor | None = None  # (V,) probabilities of the step whose token is not known yet

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._pending is not None:
            self._resolve(self._pending, int(input_ids[0, -1]))
        probs = torch.softmax(scores[0].float(), dim=-1)  # (V,)
        top = torch.topk(probs, TOP_ALTERNATIVES)
        self.records.append({
            "entropy": float(torch.special.entr(probs).sum()),
            "top": list(zip(top.indices.tolist(), top.values.tolist(), strict=True)),
        })
        self._pending = probs
        return scores

    def _resolve(self, probs: torch.Tensor, chosen: int) -> None:
        self.records[-1]["p"] = float(probs[chosen])
        self._pending = None

    def finish(self, last_token: int | None) -> list[TokenInfo]:
        if self._pending is not None and last_token is not None:
            self._resolve(self._pending, last_token)
        return self.records


class CacheTrace(StoppingCriteria):
    """Records the cache's bytes after every step; never asks to stop."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.bytes: list[int] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        self.bytes.append(kv_bytes(self.cache))
        # torch's stubs type every factory's result as Tensor; a bool tensor is what StoppingCriteria returns
        return cast(torch.BoolTensor, torch.zeros((input_ids.shape[0],), dtype=torch.bool, device=input_ids.device))

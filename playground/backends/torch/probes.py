"""What the PyTorch path measures inside model.generate without changing it: each token's probabilities under
the model and under the processed distribution, the cache's size per step, main forward passes, draft tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria

from playground.backends.base import TOP_ALTERNATIVES, TokenInfo
from playground.kv.factory import kv_bytes


class _Hook(LogitsProcessor):
    """A processor that hands the scores it sees to a callback and returns them untouched."""

    def __init__(self, see: Callable[[torch.LongTensor, torch.FloatTensor], None]) -> None:
        self.see = see

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.see(input_ids, scores)
        return scores


def _entropy(probs: torch.Tensor) -> float:
    return float(torch.special.entr(probs).sum())


class TokenProbe:
    """Each token's probability and entropy under the model's own softmax (`p_model`, first processor) and
    under the distribution it was drawn from (`p`, after every processor and sampling filter, last processor).

    transformers runs user processors before its sampling warpers, so the two ends of the list are taken by
    `probing_processors` instead. The chosen token is only known at the next step (the last of `input_ids`
    then), so each step's distributions wait until then; `finish` resolves the last one.
    """

    def __init__(self) -> None:
        self.records: list[TokenInfo] = []
        self._model: torch.Tensor | None = None  # (V,) this step's model probabilities
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None  # (model, final) of the unresolved step
        self.first = _Hook(self._see_model)
        self.last = _Hook(self._see_final)

    def _see_model(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> None:
        if self._pending is not None:
            self._resolve(int(input_ids[0, -1]))
        self._model = torch.softmax(scores[0].float(), dim=-1)  # (V,)

    def _see_final(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> None:
        model = self._model if self._model is not None else torch.softmax(scores[0].float(), dim=-1)
        final = torch.softmax(scores[0].float(), dim=-1)  # (V,); filtered tokens are -inf: probability 0
        top = torch.topk(model, TOP_ALTERNATIVES).indices  # ranked by the model's own preference
        self.records.append({
            "entropy": _entropy(final),
            "entropy_model": _entropy(model),
            "top": [(i, float(final[i]), float(model[i])) for i in top.tolist()],
        })
        self._pending = (model, final)

    def _resolve(self, chosen: int) -> None:
        assert self._pending is not None
        model, final = self._pending
        self.records[-1]["p"] = float(final[chosen])
        self.records[-1]["p_model"] = float(model[chosen])
        self._pending = None

    def finish(self, last_token: int | None) -> list[TokenInfo]:
        if self._pending is not None and last_token is not None:
            self._resolve(last_token)
        return self.records


@contextmanager
def _wrapped(obj: Any, name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    """obj.name replaced by wrap(original) on this instance only, for one generate() call (the runner's
    generation lock is held); the class's method is back afterwards."""
    setattr(obj, name, wrap(getattr(obj, name)))
    try:
        yield
    finally:
        delattr(obj, name)


@contextmanager
def probing_processors(model: Any, probe: TokenProbe | None) -> Iterator[None]:
    """The probe's two processors around the whole list generate() builds (its sampling warpers included)."""
    if probe is None:
        yield
        return

    def wrap(build: Callable[..., LogitsProcessorList]) -> Callable[..., LogitsProcessorList]:
        return lambda *args, **kwargs: LogitsProcessorList([probe.first, *build(*args, **kwargs), probe.last])

    with _wrapped(model, "_get_logits_processor", wrap):
        yield


@contextmanager
def count_forward_passes(module: torch.nn.Module) -> Iterator[list[int]]:
    """Counts calls of the main model's forward."""
    count = [0]
    handle = module.register_forward_pre_hook(lambda *_: count.__setitem__(0, count[0] + 1))
    try:
        yield count
    finally:
        handle.remove()


@contextmanager
def count_draft_tokens(model: Any) -> Iterator[list[int]]:
    """Counts the draft tokens assisted generation proposes to the main model, at the source: transformers
    builds its candidate generator inside generate(), so the factory is wrapped for the call."""
    proposed = [0]

    def wrap(build: Callable[..., Any]) -> Callable[..., Any]:
        def counting_build(*args: Any, **kwargs: Any) -> Any:
            generator = build(*args, **kwargs)
            get_candidates = generator.get_candidates

            def counting_get(input_ids: torch.Tensor, *a: Any, **k: Any) -> Any:
                candidate_ids, logits = get_candidates(input_ids, *a, **k)
                proposed[0] += candidate_ids.shape[1] - input_ids.shape[1]
                return candidate_ids, logits

            generator.get_candidates = counting_get
            return generator

        return counting_build

    with _wrapped(model, "_get_candidate_generator", wrap):
        yield proposed


class CacheTrace(StoppingCriteria):
    """Records the cache's bytes after every step; never asks to stop."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.bytes: list[int] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        self.bytes.append(kv_bytes(self.cache))
        # torch's stubs type every factory's result as Tensor; a bool tensor is what StoppingCriteria returns
        return cast(torch.BoolTensor, torch.zeros((input_ids.shape[0],), dtype=torch.bool, device=input_ids.device))

"""What the PyTorch path measures inside model.generate without changing it: each token's probabilities under
the model and under the processed distribution, what each stage of the logits chain did, the cache's size per
step, main forward passes; and the chain itself, put into the list generate() builds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria

from playground.backends.base import TOP_ALTERNATIVES, TokenInfo
from playground.backends.torch.caches.factory import kv_bytes
from playground.backends.torch.chain import TorchContext, processors
from playground.backends.torch.transformers_hooks import wrap_logits_processor
from playground.spec import RunSpec


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

    The probe's processors stand at the two ends of the list `chained` builds. The chosen token is only known at
    the next step (the last of `input_ids` then), so each step's distributions wait until then; `finish` resolves
    the last one. After each stage of the chain, a `stage` hook notes which tokens are still finite and the
    distribution so far, so each alternative records what removed it and each stage what it removed and moved.

    Assisted decoding runs the list once per position of a verification pass (the drafts, then one more), each
    seeing the drafts before it as generated. Between `begin_step` and `end_step(kept)` the probe keeps every
    position's distributions; `end_step` drops the records of the positions past the main model's own token and
    leaves that token's record open, since it is not the draft the next position saw. While `paused` (the draft
    is being made: a draft model's generate runs the same list) nothing is recorded.
    """

    def __init__(self) -> None:
        self.records: list[TokenInfo] = []
        self._model: torch.Tensor | None = None  # (V,) this step's model probabilities
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None  # (model, final) of the unresolved step
        self._alive: list[tuple[str, torch.Tensor]] = []  # (stage, (V,) still finite after it) of this step
        self._stages: list[tuple[str, int, float]] = []  # (stage, tokens removed, mass moved) of this step
        self._last: torch.Tensor | None = None  # (V,) the distribution after the latest stage of this step
        self._state: dict[str, float] = {}  # what the chain's carrying stages acted under at this step
        self._step: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # assisted: a pass's (model, final)s
        self._step_start = 0  # assisted: the pass's first record
        self._own_stage: tuple[str, torch.Tensor] | None = None  # (name, (V,) the model's own logits) before the chain
        self.paused = False
        self.first = _Hook(self._see_model)
        self.last = _Hook(self._see_final)

    def stage(self, name: str, carried: Callable[[], dict[str, float]] | None = None) -> _Hook:
        """A hook to place after the chain's stage `name`: what it removed, and the mass it moved (the total
        variation between the distributions before and after it); `carried`: the state a carrying stage acted
        under (mirostat's μ), for the token's record."""
        def see(_ids: torch.LongTensor, scores: torch.FloatTensor) -> None:
            if self.paused:
                return
            if carried is not None:
                self._state.update(carried())
            self._after_stage(name, scores)

        return _Hook(see)

    def before_chain(self, name: str, model_logits: torch.Tensor) -> None:
        """A strategy's own stage ahead of the chain (DoLa's contrast of layers): `model_logits` (B, V) are the
        model's own, and the scores the list sees next are what the stage made of them. The model's
        probabilities are then the own ones, and the stage is recorded as the first, with what it removed and
        moved."""
        if not self.paused:
            self._own_stage = (name, model_logits[0].float())

    def _after_stage(self, name: str, scores: torch.Tensor) -> None:
        alive = torch.isfinite(scores[0])
        before = self._alive[-1][1] if self._alive else None
        removed = int((before & ~alive).sum()) if before is not None else int((~alive).sum())
        probs = torch.softmax(scores[0].float(), dim=-1)
        moved = 0.5 * float((probs - self._last).abs().sum()) if self._last is not None else 0.0
        self._alive.append((name, alive))
        self._stages.append((name, removed, moved))
        self._last = probs

    def begin_step(self) -> None:
        """Assisted: a verification pass starts; its positions' records follow."""
        self._step, self._step_start = [], len(self.records)

    def end_step(self, kept: int) -> None:
        """Assisted: the pass kept `kept` drafts and then the main model's own token."""
        if self._step is None:
            return
        del self.records[self._step_start + kept + 1:]
        if kept < len(self._step):
            self._pending = self._step[kept]  # resolved by the token that follows, as a one-token step's is
        self._step = None

    def _see_model(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> None:
        if self.paused:
            return
        if self._pending is not None:
            self._resolve(int(input_ids[0, -1]))
        own = self._own_stage[1] if self._own_stage is not None else scores[0].float()
        self._model = torch.softmax(own, dim=-1)  # (V,)
        self._alive = [("", torch.isfinite(own))]
        self._stages = []
        self._state = {}
        self._last = self._model
        if self._own_stage is not None:
            self._after_stage(self._own_stage[0], scores)
            self._own_stage = None

    def _cut(self, token: int) -> str | None:
        """The stage that took `token` out: after which it was -inf, having been finite before (None: it stayed, or
        it was -inf before any stage, as transformers' own processors, which run before the chain, leave it)."""
        for (_, before), (name, alive) in zip(self._alive, self._alive[1:], strict=False):
            if bool(before[token]) and not bool(alive[token]):
                return name
        return None

    def _see_final(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> None:
        if self.paused:
            return
        model = self._model if self._model is not None else torch.softmax(scores[0].float(), dim=-1)
        final = torch.softmax(scores[0].float(), dim=-1)  # (V,); filtered tokens are -inf: probability 0
        top = torch.topk(model, TOP_ALTERNATIVES).indices  # ranked by the model's own preference
        record: TokenInfo = {
            "entropy": _entropy(final),
            "entropy_model": _entropy(model),
            "top": [(i, float(final[i]), float(model[i])) for i in top.tolist()],
            "top_cut": [self._cut(i) for i in top.tolist()],
            "stages": list(self._stages),
        }
        if self._state:
            record["state"] = dict(self._state)
        self.records.append(record)
        self._pending = (model, final)
        if self._step is not None:
            self._step.append(self._pending)

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
def chained(model: Any, spec: RunSpec, context: TorchContext, probe: TokenProbe | None) -> Iterator[None]:
    """The chain's processors after those generate() builds, each followed by the probe's stage hook, and the
    probe's two processors around the whole list."""
    stages = processors(spec, context)

    def wrap(build: Callable[..., LogitsProcessorList]) -> Callable[..., LogitsProcessorList]:
        def built(*args: Any, **kwargs: Any) -> LogitsProcessorList:
            own = list(build(*args, **kwargs))
            if probe is None:
                return LogitsProcessorList([*own, *(processor for _, processor in stages)])
            staged = [item for name, processor in stages
                      for item in (processor, probe.stage(name, getattr(processor, "carried", None)))]
            return LogitsProcessorList([probe.first, *own, *staged, probe.last])

        return built

    with wrap_logits_processor(model, wrap):
        yield


@contextmanager
def count_forward_passes(module: torch.nn.Module) -> Iterator[list[int]]:
    """Counts calls of the main model's forward. The hook runs outside whatever torch.compile traces: traced, it
    would be compiled with the count as a constant, and compiled again at every step."""
    count = [0]
    handle = module.register_forward_pre_hook(torch.compiler.disable(lambda *_: count.__setitem__(0, count[0] + 1)))
    try:
        yield count
    finally:
        handle.remove()


class CacheTrace(StoppingCriteria):
    """Records the cache's bytes after every step; never asks to stop."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.bytes: list[int] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        self.bytes.append(kv_bytes(self.cache))
        # torch's stubs type every factory's result as Tensor; a bool tensor is what StoppingCriteria returns
        return cast(torch.BoolTensor, torch.zeros((input_ids.shape[0],), dtype=torch.bool, device=input_ids.device))

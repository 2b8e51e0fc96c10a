"""The logits stages that carry a state from one drawn token to the next: mirostat v2 (μ) and adaptive-p (the
running average of the chosen tokens' probabilities), as llama.cpp defines them (docs/samplers.md).

A LogitsProcessor only learns which token was drawn at its next call (the last of `input_ids`), so each stage
keeps the distribution its state is settled by and settles it then, before it acts; the state a token was drawn
under is what `carried()` reports for the token view. One instance serves one request (the chain is built per
run), one state per row.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
from transformers import LogitsProcessor

from playground.backends.torch.samplers import in_range

ADAPTIVE_WIDTH, ADAPTIVE_PEAK, ADAPTIVE_SHARPNESS = 0.3, 5.0, 10.0  # llama.cpp's adaptive-p transform constants


class _Carrying(LogitsProcessor, ABC):
    """A stage with one float per row that a drawn token moves."""

    key = ""  # the token record's name for the state

    def __init__(self) -> None:
        self.state: torch.Tensor | None = None  # (B, 1) the state the latest call acted under
        self._observed: torch.Tensor | None = None  # (B, V) probabilities the next drawn token settles it by

    @abstractmethod
    def initial(self) -> float:
        """The state before the first token."""

    @abstractmethod
    def act(self, scores: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """The scores after this stage, under `state` (B, 1)."""

    @abstractmethod
    def observed(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        """(B, V) the probabilities whose value at the drawn token settles the state."""

    @abstractmethod
    def settled(self, state: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """The state (B, 1) after a token whose observed probability was `chosen` (B, 1)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if self.state is None or self._observed is None:
            self.state = torch.full((scores.shape[0], 1), self.initial(), dtype=torch.float32, device=scores.device)
        else:  # the previous call's token is drawn: it is the last of input_ids now
            chosen = self._observed.gather(-1, input_ids[:, -1:].clamp(max=self._observed.shape[-1] - 1))
            self.state = self.settled(self.state, chosen)
        after = self.act(scores, self.state)
        self._observed = self.observed(scores, after)
        return after

    def carried(self) -> dict[str, float]:
        """The first row's state at the latest call: what the token drawn from it was drawn under."""
        return {} if self.state is None else {self.key: float(self.state[0, 0])}


class MirostatV2LogitsWarper(_Carrying):
    """llama.cpp's mirostat v2: tokens whose surprise -log2 p exceeds μ are removed (the best stays when all
    would go); μ starts at 2τ and moves by -η x (the drawn token's surprise under the cut distribution - τ)."""

    key = "mirostat_mu"

    def __init__(self, tau: float, eta: float) -> None:
        super().__init__()
        self.tau = in_range("mirostat_tau", tau, 0.0, 20.0, low_open=True)
        self.eta = in_range("mirostat_eta", eta, 0.0, 1.0)

    def initial(self) -> float:
        return 2.0 * self.tau

    def act(self, scores: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        logits = scores.float()
        surprise = -torch.log_softmax(logits, dim=-1) / math.log(2.0)
        remove = surprise > state
        best = logits >= logits.amax(dim=-1, keepdim=True)
        none_left = (remove | ~torch.isfinite(logits)).all(dim=-1, keepdim=True)
        return scores.masked_fill(remove & ~(none_left & best), -math.inf)

    def observed(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return torch.softmax(after.float(), dim=-1)

    def settled(self, state: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        return state - self.eta * (-torch.log2(chosen) - self.tau)


class AdaptivePLogitsWarper(_Carrying):
    """llama.cpp's adaptive-p: every candidate's logit becomes 5 - 10 d² / (1 + d), d = |p - adapted| / 0.3, where
    adapted = clamp(2 x target - average, 0, 1) and average is the running average of the drawn tokens'
    probabilities as this stage received them (starting at the target; decay x average + (1 - decay) x p)."""

    key = "adaptive_p_average"

    def __init__(self, target: float, decay: float) -> None:
        super().__init__()
        self.target = in_range("adaptive_target", target, 0.0, 1.0, low_open=True)
        self.decay = in_range("adaptive_decay", decay, 0.0, 0.99)

    def initial(self) -> float:
        return self.target

    def act(self, scores: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores.float(), dim=-1)
        adapted = (2.0 * self.target - state).clamp(0.0, 1.0)
        distance = (probs - adapted).abs() / ADAPTIVE_WIDTH
        logits = ADAPTIVE_PEAK - ADAPTIVE_SHARPNESS * distance * distance / (1.0 + distance)
        return torch.where(torch.isfinite(scores), logits.to(scores.dtype), -math.inf)

    def observed(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        return torch.softmax(before.float(), dim=-1)

    def settled(self, state: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        return self.decay * state + (1.0 - self.decay) * chosen

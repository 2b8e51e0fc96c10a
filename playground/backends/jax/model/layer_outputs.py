"""The traced model's forward with chosen layers' hidden states beside the logits: what contrastive search (the
last hidden state, the degeneration penalty's) and DoLa (early layers read through the output head) need.

transformers' `hidden_states` are [0] the embeddings, [i] the output of layer i - 1 and [N] the final norm's
output (N layers). A layer's logits go through the model's own output head inside the same traced call, so an
int8 head (int8.py) reads its scale as the final logits do.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

PREFIX = "inner."  # the wrapped model's parameter names, as functional_call sees them through the wrapper


def kept(states: torch.Tensor, keep: int | torch.Tensor) -> torch.Tensor:
    """The positions `logits_to_keep` keeps of (B, T, H) states: the last `keep` (0: all), or those indexed."""
    if isinstance(keep, int):
        return states[:, -keep:] if keep else states
    return states[:, keep]


class LayerOutputs(nn.Module):
    """A model whose forward also returns the hidden states after `hidden` layers, whole (B, T, H), and the
    states after `heads` layers through the output head at the kept positions (B, kept, V)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, ids: torch.Tensor, *, hidden: tuple[int, ...], heads: tuple[int, ...],
                keep: int | torch.Tensor, **kwargs: Any) -> tuple[Any, ...]:
        out = self.inner(ids, output_hidden_states=True, logits_to_keep=keep, **kwargs)
        states = out.hidden_states
        head: nn.Module = self.inner.get_output_embeddings()  # type: ignore[operator]
        return out.logits, tuple(states[i] for i in hidden), tuple(head(kept(states[i], keep)) for i in heads)


def prefixed(weights: dict[str, Any]) -> dict[str, Any]:
    """The model's weights named as the wrapper's parameters."""
    return {PREFIX + name: value for name, value in weights.items()}

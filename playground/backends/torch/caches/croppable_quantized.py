"""Quantized cache layers that assisted decoding can roll back, with the tokens plain greedy decoding gives.

transformers' quantized layers cannot undo a verify pass: quanto's layer re-quantizes its whole store whenever
its full-precision residual fills, drafts included, and the fp8 layer inherits a `crop` that cuts its (unused)
full-precision tensors, not its quantized ones. These layers keep every unverified token where a rollback can
reach it:
- quanto (2, 4 bits): during assisted decoding a verify pass only appends to the residual; `crop` drops the
  rejected drafts from it, and only then flushes an accepted, full residual into the quantized store.
- fp8 (8 bits): tokens are quantized one by one with the scale frozen at the first update, so `crop` cuts the
  quantized tensors themselves.

Speculation must also leave the attention each token sees as plain decoding leaves it. A token after a flush
sees the flushed tokens quantized, and one pass cannot show a key quantized to some queries and exact to others.
So `draft_room` caps a pass's drafts at the next flush. The first pass (the prompt) gets no drafts: quanto
quantizes what it stores first, and fp8 takes its scale from it.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from transformers.cache_utils import Cache, Fp8QuantizedLayer, QuantoQuantizedLayer


class CroppableQuantoLayer(QuantoQuantizedLayer):
    """KIVI-style quanto layer (a full-precision residual of `residual_length` tokens) that can roll back."""

    is_croppable = True

    def __init__(self, nbits: int, residual_length: int) -> None:
        super().__init__(nbits=nbits, residual_length=residual_length)
        self.record_past = False  # set by generate's assisted path: flush only once crop() has removed rejects

    def activate_past_recording(self) -> None:
        self.record_past = True

    def residual(self) -> int:
        """Tokens held in full precision (transformers empties the residual to a 1-D tensor at each flush)."""
        if not self.is_initialized:
            return 0
        keys, _ = self._held()
        return keys.shape[-2] if keys.dim() == 4 else 0

    def _held(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The full-precision residual's keys and values (B, H, r, D), set once the layer is initialized."""
        if self.keys is None or self.values is None:
            raise RuntimeError("the quantized layer holds no residual before its first update")
        return self.keys, self.values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.record_past or not self.is_initialized:
            return super().update(key_states, value_states, *args, **kwargs)
        self.cumulative_length += key_states.shape[-2]
        held_keys, held_values = self._held()
        keys = torch.cat([held_keys, key_states], dim=-2) if self.residual() else key_states
        values = torch.cat([held_values, value_states], dim=-2) if self.residual() else value_states
        self.keys, self.values = keys, values
        return (torch.cat([self._dequantize(self._quantized_keys), keys], dim=-2),
                torch.cat([self._dequantize(self._quantized_values), values], dim=-2))

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last rejected drafts from the residual, then flush it if the accepted tokens filled it."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop({tokens_to_remove}): pass a negative count of tokens to remove")
        if tokens_to_remove < 0:
            if -tokens_to_remove > self.residual():
                raise RuntimeError(f"crop({tokens_to_remove}): only the {self.residual()} full-precision tokens "
                                   "can be rolled back; the rest are already quantized")
            keys, values = self._held()
            self.keys, self.values = keys[..., :tokens_to_remove, :], values[..., :tokens_to_remove, :]
            self.cumulative_length += tokens_to_remove
        if self.residual() >= self.residual_length:
            self._flush()

    def _flush(self) -> None:
        """What transformers' update does when the residual fills: re-quantize the store with the residual in."""
        keys, values = self._held()
        self._quantized_keys = self._quantize(
            torch.cat([self._dequantize(self._quantized_keys), keys], dim=-2).contiguous(), axis=self.axis_key)
        self._quantized_values = self._quantize(
            torch.cat([self._dequantize(self._quantized_values), values], dim=-2).contiguous(), axis=self.axis_value)
        self.keys = torch.tensor([], dtype=self.dtype, device=self.device)
        self.values = torch.tensor([], dtype=self.dtype, device=self.device)

    def draft_room(self) -> int:
        """Drafts the next verify pass may carry without running past the next flush."""
        if not self.is_initialized:
            return 0
        return self.residual_length - 1 - self.residual()


class CroppableFp8Layer(Fp8QuantizedLayer):
    """fp8 layer (per-tensor scale frozen at the first update) whose crop cuts its quantized tensors."""

    is_croppable = True

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop({tokens_to_remove}): pass a negative count of tokens to remove")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        stored = tuple[torch.Tensor, torch.Tensor]  # (fp8 states (B, H, T, D), per-tensor scale)
        keys, key_scale = cast(stored, self._quantized_keys)
        values, value_scale = cast(stored, self._quantized_values)
        self._quantized_keys = (keys[..., :tokens_to_remove, :], key_scale)
        self._quantized_values = (values[..., :tokens_to_remove, :], value_scale)
        self.cumulative_length += tokens_to_remove

    def draft_room(self) -> int | None:
        """None (no limit) once the scale is set; no drafts in the pass that sets it."""
        return 0 if not self.is_initialized else None


def draft_room(cache: Cache) -> int | None:
    """The most drafts the next verify pass may carry over this cache; None when any number keeps it exact."""
    rooms = [room for layer in cache.layers
             if (room := getattr(layer, "draft_room", lambda: None)()) is not None]
    return min(rooms) if rooms else None

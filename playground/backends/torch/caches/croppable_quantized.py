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


class _Side(int):
    """A quantization axis that also names the side it quantizes. transformers' layer quantizes keys and values
    through one `_quantize(tensor, axis)`, passing `axis_key` or `axis_value`: the axis is all that tells them
    apart there, so each carries its side (and still compares equal to transformers' and quanto's axis 0)."""

    side: str

    def __new__(cls, axis: int, side: str) -> _Side:
        made = super().__new__(cls, axis)
        made.side = side
        return made

    def __reduce__(self) -> tuple[type[_Side], tuple[int, str]]:
        """Copied (the prefix store keeps a layer whole) with its side."""
        return _Side, (int(self), self.side)


class CroppableQuantoLayer(QuantoQuantizedLayer):
    """KIVI-style quanto layer (a full-precision residual of `residual_length` tokens) that can roll back, its
    keys in `nbits` and its values in `value_nbits` (2 or 4 each; transformers' layer takes one nbits for both)."""

    is_croppable = True

    def __init__(self, nbits: int, residual_length: int, value_nbits: int | None = None) -> None:
        super().__init__(nbits=nbits, residual_length=residual_length)
        from optimum.quanto import qint2, qint4  # as transformers imports it: inside, after its own check

        value_nbits = nbits if value_nbits is None else value_nbits
        if value_nbits not in (2, 4):
            raise ValueError(f"`value_nbits` for the `quanto` backend has to be one of [2, 4] but got {value_nbits}")
        self.value_nbits = value_nbits
        self.qtypes = {"keys": self.qtype, "values": qint4 if value_nbits == 4 else qint2}
        self.axis_key, self.axis_value = _Side(self.axis_key, "keys"), _Side(self.axis_value, "values")
        self.record_past = False  # set by generate's assisted path: flush only once crop() has removed rejects

    # transformers' base class declares _quantize(tensor); its QuantizedLayer, ours' parent, calls it with an axis
    def _quantize(self, tensor: torch.Tensor, axis: int) -> Any:  # type: ignore[override]
        """transformers' quanto quantization, in the bits of the side `axis` names."""
        from optimum.quanto import quantize_weight

        if not isinstance(axis, _Side):
            raise TypeError(f"_quantize: axis {axis!r} does not say whether it quantizes keys or values")
        qtype = self.qtypes[axis.side]
        scale, zeropoint = self.optimizer(tensor, qtype, int(axis), self.q_group_size)
        return quantize_weight(tensor, qtype, int(axis), scale, zeropoint, self.q_group_size)

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

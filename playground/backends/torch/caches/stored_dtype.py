"""A full-precision cache whose keys and values are stored in another dtype (bfloat16): half the bytes of fp32,
while attention still computes in the model's dtype.

transformers' cache layers (and ours) take their dtype from the states they are given, so a layer stores bf16
when `update` hands it bf16 states, and the keys and values it returns to attention are cast back up. The
subclass adds only those two casts and no state, so a fresh layer of any kind (dynamic, static, sliding, sink)
takes it on in place, without being rebuilt: its own rules (what it keeps, evicts, rotates or crops) are
untouched. What attention sees is every key and value rounded to bf16 once, when stored; the prompt's own
forward sees them so too, as the cache returns them from its store.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Cache

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_MADE: dict[tuple[type, str], type] = {}  # one class per layer class and dtype, made once


def stored_class(layer_class: Any, dtype: str) -> type:
    """`layer_class` storing its keys and values as `dtype`, returning them in the dtype they came in."""
    made = _MADE.get((layer_class, dtype))
    if made is not None:
        return made
    stored = DTYPES[dtype]

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = layer_class.update(self, key_states.to(stored), value_states.to(stored), *args, **kwargs)
        return keys.to(key_states.dtype), values.to(value_states.dtype)

    # one base only: CPython lets an object change its class only to one of the same layout
    made = _MADE[layer_class, dtype] = type(
        f"{dtype.capitalize()}{layer_class.__name__}", (layer_class,),
        {"update": update, "stored_dtype": stored, "__doc__": f"{layer_class.__name__} stored as {dtype}"})
    return made


def stored_as(cache_object: Cache, dtype: str) -> Cache:
    """The fresh cache with every layer storing `dtype` ("float32": the cache as it is)."""
    if dtype == "float32":
        return cache_object
    layers: list[Any] = list(cache_object.layers)
    for layer in layers:
        if layer.is_initialized:
            raise ValueError("stored_as: a cache's store dtype is chosen before its first update")
        layer.__class__ = stored_class(type(layer), dtype)
    return cache_object

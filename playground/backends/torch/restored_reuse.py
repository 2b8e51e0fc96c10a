"""The prefix store on the PyTorch caches that cannot be rebuilt from their keys and values alone: the quantized
cache (a quantized store beside a full-precision residual), the sliding cache (only its window) and the sink cache
(its sinks, rotated forward, and its recent window).

Their snapshot is the cache's layers whole (a deep copy: scales, residual, counters, the sinks' first-seen keys),
and a restore puts a copy of them into the run's fresh cache, so the run continues exactly the state the earlier
run left and never writes into the entry. quanto's packed tensors cannot be deep-copied (a tensor subclass whose
clone is another type); they are shared instead, which is safe because a quantized layer only ever replaces them
(each flush quantizes anew), never writes into them. A partial match is cut back with the layers' own `crop`
only where the state at the cut is still in the entry, and otherwise runs cold with the reason:

- a quantized (quanto) layer can cut back its full-precision residual, not what it has quantized; fp8 cuts its
  quantized tokens (its scale stays the first prefill's);
- a sliding layer can be cut back while nothing has left its window;
- a sink layer can be cut back while it has evicted nothing.

Continuing such a cache is not the cold computation (docs/caches.md), so a warm run is measured against the cold
run of the same tokens afterwards (reuse_vs_cold.py).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers import Cache
from transformers.cache_utils import DynamicSlidingWindowLayer

from playground.backends.prefix_store import Kept, Match
from playground.backends.torch.caches.croppable_quantized import CroppableQuantoLayer
from playground.backends.torch.caches.factory import kv_bytes
from playground.backends.torch.caches.sink import SinkLayer


def snapshot(cache: Cache, prompt: list[int], first: list[int]) -> Kept | None:
    """A deep copy of the cache's layers, with the ids whose states they hold (the prompt and the new tokens but
    the last; cut back to them where the cache holds more); None where it holds nothing or cannot be cut back."""
    ids = prompt + first
    total = int(cache.get_seq_length())
    held = min(total, len(ids))
    if held <= 0 or any(crop_blocker(layer, total, held) for layer in cache.layers):
        return None  # nothing, or more than the ids say and no way to cut it back to them
    layers = copy_layers(cache.layers)
    for layer in layers if total > held else []:
        layer.crop(held - total)
    return Kept(tuple(ids[:held]), layers, kv_bytes(Cache(layers=layers)))


def restore(match: Match, cache: Cache) -> str | None:
    """Put a copy of the entry's layers, cut back to `match.shared` tokens, into the run's fresh `cache`; the
    reason in one line where a layer cannot be cut back there (then `cache` is left fresh: the run is cold)."""
    held, shared = len(match.entry.ids), match.shared
    for layer in match.entry.snapshot:
        reason = crop_blocker(layer, held, shared)
        if reason is not None:
            return reason
    layers = copy_layers(match.entry.snapshot)
    if shared < held:
        for layer in layers:
            layer.crop(shared - held)
    cache.layers = layers
    return None


def restored(match: Match, like: Cache) -> Cache:
    """A second copy of the entry as `restore` gives it (the warm side of the comparison with the cold run)."""
    fresh = copy.copy(like)
    fresh.layers = []
    if restore(match, fresh) is not None:
        raise RuntimeError("the entry was restored once and cannot be restored again")
    return fresh


def copy_layers(layers: list[Any]) -> list[Any]:
    """A deep copy of cache layers, sharing the tensor subclasses (quanto's packed tensors) it cannot copy."""
    memo: dict[int, Any] = {}
    for layer in layers:
        for value in vars(layer).values():
            if isinstance(value, torch.Tensor) and type(value) not in (torch.Tensor, torch.nn.Parameter):
                memo[id(value)] = value
    return copy.deepcopy(layers, memo)


def crop_blocker(layer: Any, held: int, shared: int) -> str | None:
    """Why `layer`, holding `held` tokens, cannot be cut back to its first `shared` (None: it can)."""
    if shared >= held:
        return None
    if isinstance(layer, SinkLayer) and layer.evicted:
        first = layer.num_sink_tokens
        return (f"the sink cache has evicted tokens {first}-{first + layer.evicted - 1}, so it cannot be cut back "
                f"to token {shared}")
    if isinstance(layer, CroppableQuantoLayer) and held - shared > layer.residual():
        return (f"the quantized store holds token {shared} quantized; only its last {layer.residual()} "
                "full-precision tokens can be cut back")
    if isinstance(layer, DynamicSlidingWindowLayer) and layer.cumulative_length >= layer.sliding_window:
        return f"the window no longer holds token {max(shared - layer.sliding_window + 1, 0)}"
    return None

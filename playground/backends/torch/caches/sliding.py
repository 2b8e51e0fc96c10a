"""Sliding-window KV caches: the model's own window where it has sliding layers, an imposed one where it has none.

Native (Gemma3, Mistral-style configs): the model already builds sliding masks from `config.sliding_window`
and transformers' sliding layers bound the memory, so the cache simply mirrors the model's layer layout
(global layers stay global) and reports the model's window.

Imposed (Llama and other all-full-attention models): bounding the cache is not enough. Decode steps are
exact with transformers' `DynamicSlidingWindowLayer` (it returns the last W-1 keys plus the new one), but
a multi-token forward (the prompt, a chat continuation) attends through `create_causal_mask`, which for
these models never applies a window: the last prompt token would still see the whole prompt. The mask
has to change, and the mask cannot be told by a config change alone (Llama's forward only ever builds a
causal mask) without mutating a shared model. So the window travels with the cache instead:
`get_mask_sizes` returns its kv offset as a `WindowedOffset` (an int that also carries the window), and
the sdpa/eager entries of transformers' `AttentionMaskInterface` are wrapped once, process-wide, to add
transformers' own `sliding_window_overlay` when the offset carries one. For every other cache the offset
is a plain int and the wrapped functions behave exactly as before, so the model object is never touched,
concurrent runs on one model (with any cache) are unaffected, and nothing needs restoring.

"Window W" means each query sees itself and the W-1 tokens before it, on every layer (transformers'
definition). Through L layers information still travels up to L*(W-1) tokens back, as in Mistral.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers.cache_utils import (
    DYNAMIC_LAYER_TYPE_MAPPING,
    STATIC_LAYER_TYPE_MAPPING,
    Cache,
    CacheLayerMixin,
    DummyLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionCacheLayerMixin,
    StaticSlidingWindowLayer,
    get_layer_types_and_kwargs,
)
from transformers.masking_utils import and_masks, causal_mask_function, sliding_window_overlay

from playground.backends.refusals import check_imposable
from playground.backends.torch.transformers_hooks import (
    install_mask_wrapper,
    mask_wrapper_installed,
)

# What Cache(layers=...) holds: a model's native layers may be linear-attention ones too.
CacheLayers = list[CacheLayerMixin | LinearAttentionCacheLayerMixin | DummyLayer]


class WindowedOffset(int):
    """A kv offset that also tells the mask function which window to apply."""

    window: int

    def __new__(cls, value: int, window: int) -> WindowedOffset:
        offset = super().__new__(cls, value)
        offset.window = window
        return offset


def windowed_mask(mask_interface: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a mask backend so offsets carrying a window get a sliding-window mask; plain ints pass through."""

    def mask(*args: Any, kv_offset: int = 0, mask_function: Callable[..., Any] = causal_mask_function,
             **kwargs: Any) -> Any:
        window = getattr(kv_offset, "window", None)
        if window is not None:
            mask_function = and_masks(mask_function, sliding_window_overlay(window))
            kwargs["local_size"] = window  # sdpa must not skip the mask once the keys span more than the window
            kv_offset = int(kv_offset)
        return mask_interface(*args, kv_offset=kv_offset, mask_function=mask_function, **kwargs)

    mask.playground_windowed = True  # type: ignore[attr-defined]
    return mask


def install_windowed_masks() -> None:
    """Wrap the sdpa/eager mask backends once per process (idempotent, safe from several threads)."""
    install_mask_wrapper(windowed_mask, "playground_windowed")


def windowed_offset(kv_offset: int, window: int) -> WindowedOffset:
    """The offset to report; re-wraps the backends if something registered a plain one over ours since."""
    if not mask_wrapper_installed("playground_windowed"):
        install_windowed_masks()
    return WindowedOffset(kv_offset, window)


class WindowLayer(DynamicSlidingWindowLayer):
    """transformers' dynamic sliding layer (holds W-1 tokens) whose mask offset carries the window."""

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        kv_length, kv_offset = super().get_mask_sizes(query_length)
        return kv_length, windowed_offset(kv_offset, self.sliding_window)


class StaticWindowLayer(StaticSlidingWindowLayer):
    """transformers' static sliding layer (min(W, max_cache_len) slots) whose mask offset carries the window."""

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        kv_length, kv_offset = super().get_mask_sizes(query_length)
        return kv_length, windowed_offset(kv_offset, self.max_cache_len)


class SlidingWindowCache(Cache):
    """A cache whose attention is limited to a window: `window` is the one applied, `native` says whose it is.

    `max_cache_len=None` gives dynamic layers; an int gives preallocated static layers (torch.compile, JAX).
    """

    def __init__(self, config: Any, window: int, max_cache_len: int | None = None) -> None:
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"sliding window must be an int >= 1 tokens (got window={window!r})")
        if max_cache_len is not None and (not isinstance(max_cache_len, int) or max_cache_len < 1):
            raise ValueError(f"max_cache_len must be None (dynamic) or an int >= 1 (got {max_cache_len!r})")
        text_config = config.get_text_config(decoder=True)
        layer_types, per_layer_kwargs = get_layer_types_and_kwargs(text_config)
        self.native = "sliding_attention" in layer_types
        layers: CacheLayers
        if self.native:
            self.window = int(text_config.sliding_window)
            layers = native_layers(layer_types, per_layer_kwargs, max_cache_len)
        else:
            check_imposable(text_config, layer_types)
            install_windowed_masks()
            self.window = window
            layers = [
                WindowLayer(sliding_window=window) if max_cache_len is None
                else StaticWindowLayer(max_cache_len=max_cache_len, sliding_window=window)
                for _ in layer_types
            ]
        super().__init__(layers=layers)


def native_layers(layer_types: list[str], per_layer_kwargs: list[dict[str, Any]],
                  max_cache_len: int | None) -> CacheLayers:
    """The layers DynamicCache / StaticCache would build: the model's masks already apply its window."""
    pairs = zip(layer_types, per_layer_kwargs, strict=True)
    if max_cache_len is None:
        return [DYNAMIC_LAYER_TYPE_MAPPING[kind](**kwargs) for kind, kwargs in pairs]
    return [STATIC_LAYER_TYPE_MAPPING[kind](max_cache_len=max_cache_len, **kwargs) for kind, kwargs in pairs]


def make_sliding_cache(model: Any, window: int, max_cache_len: int | None = None) -> SlidingWindowCache:
    """A sliding-window cache for `model`: its own window if it has sliding layers (see `.window`), else `window`."""
    return SlidingWindowCache(model.config, window, max_cache_len)

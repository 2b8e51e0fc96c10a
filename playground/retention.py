"""What a bounded or quantized KV cache still holds at a decoding step, position by position.

A pure function of the cache's settings, the model's layer layout and the step, so the page can draw it
without torch; `tests/unit/test_retention.py` checks it against the keys the real cache objects hold.

Step k (1 .. new_tokens) is the cache right after the forward pass that produced new token k: the prompt and
new tokens 1 .. k-1 have been written (token k is written by the next pass, and the last new token never is).
Rules, as the caches implement them:
- sliding: transformers' `DynamicSlidingWindowLayer` stores the last W-1 tokens (the next one attends over
  those and itself: W); on a model with its own sliding layers (Gemma3) only those layers slide, with the
  model's window, and its global layers keep everything.
- sink (`playground.backends.torch.caches.sink`): the first S tokens stay (moved forward in RoPE), plus the most
  recent W-S.
- quantized, 2 or 4 bits (transformers' `QuantizedLayer`, KIVI): the prompt is quantized when it is written;
  new tokens gather in a full-precision residual that is quantized with everything else when it reaches
  `residual_length`, so the newest (written - prompt) mod R tokens are full precision. 8 bits (fp8) quantizes
  everything as it arrives. On a model with sliding layers those keep their bounded full-precision window.
  The JAX path (backends/jax/caches/quantized.py) quantizes every token as it is written and also keeps the
  newest `residual_length` in a full-precision ring that attention reads instead, so there the newest
  min(written, R) tokens are full precision (none with 8 bits). Its sliding and sink caches keep what the
  PyTorch ones keep (their tokens are tested equal).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

State = Literal["kept", "sink", "evicted", "quantized", "unwritten"]
# Caches whose contents differ from "every position so far, full precision": the ones worth drawing.
RETAINING_CACHES = ("sliding", "sink", "quantized")


@dataclass(frozen=True, kw_only=True)
class CacheSettings:
    """The cache's own parameters (RunSpec names) and the model's layout that decides what it keeps."""

    cache: str
    window: int = 256  # sliding (imposed) and sink: keys held, sinks included for sink
    sink_tokens: int = 4
    cache_bits: int = 4
    residual_length: int = 128
    layer_types: tuple[str, ...] = ("full_attention",)
    model_window: int | None = None  # the model's own sliding window, when it has sliding layers
    backend: str = "torch"  # the quantized caches differ in which tokens stay full precision


@dataclass(frozen=True)
class CacheRow:
    """The state of every position (prompt, then new tokens) in a group of layers that keep the same."""

    layers: str  # which layers, e.g. "all 30 layers", "15 sliding layers (window 512)"
    states: tuple[State, ...]


def written(prompt_tokens: int, step: int) -> int:
    """Tokens in the cache at step `step`: the prompt and the new tokens before the step's own."""
    return prompt_tokens + max(step, 1) - 1


def _window(total: int, n: int, keep: int) -> tuple[State, ...]:
    """The last `keep` of the `n` written positions kept, older ones evicted."""
    return tuple("unwritten" if i >= n else "kept" if i >= n - keep else "evicted" for i in range(total))


def _sink(total: int, n: int, sinks: int, window: int) -> tuple[State, ...]:
    recent = n - (window - sinks) if n > window else sinks
    return tuple("unwritten" if i >= n else "sink" if i < sinks else "kept" if i >= recent else "evicted"
                 for i in range(total))


def _quantized(total: int, n: int, prompt_tokens: int, settings: CacheSettings) -> tuple[State, ...]:
    bits, residual = settings.cache_bits, settings.residual_length
    ring = settings.backend == "jax"
    full = 0 if bits == 8 else min(n, residual) if ring else (n - prompt_tokens) % residual
    return tuple("unwritten" if i >= n else "kept" if i >= n - full else "quantized" for i in range(total))


def _slid(window: int, n: int) -> int:
    """Tokens a DynamicSlidingWindowLayer stores: the last W-1 (it slices `[-(W-1):]`, which for W=1 is all)."""
    return window - 1 if window > 1 else n


def _count(layers: int, what: str) -> str:
    return f"{layers} {what}layer{'' if layers == 1 else 's'}"


def retention(settings: CacheSettings, prompt_tokens: int, new_tokens: int, step: int) -> list[CacheRow]:
    """Per group of layers, the state of each of the prompt_tokens + new_tokens positions at step `step`."""
    if settings.cache not in RETAINING_CACHES:
        raise ValueError(f"retention is drawn for caches {RETAINING_CACHES}, not {settings.cache!r}")
    total, n = prompt_tokens + new_tokens, written(prompt_tokens, step)
    kinds = Counter(settings.layer_types)
    sliding, full = kinds.get("sliding_attention", 0), kinds.get("full_attention", 0)
    if settings.cache == "sink":
        return [CacheRow(_count(full, "") + " (sinks + window)", _sink(total, n, settings.sink_tokens,
                                                                       settings.window))]
    rows: list[CacheRow] = []
    if sliding and settings.model_window:  # the model's own sliding layers, under either cache
        rows.append(CacheRow(_count(sliding, "sliding ") + f" (window {settings.model_window})",
                             _window(total, n, _slid(settings.model_window, n))))
    if settings.cache == "quantized":
        what = _count(full, "global " if sliding else "") + f" ({settings.cache_bits}-bit)"
        rows.append(CacheRow(what, _quantized(total, n, prompt_tokens, settings)))
    elif sliding:
        rows.append(CacheRow(_count(full, "global ") + " (no window)", _window(total, n, n)))
    else:
        kept = _slid(settings.window, n)
        rows.append(CacheRow(_count(full, "") + f" (window {settings.window})", _window(total, n, kept)))
    return rows


def settings_for(spec: dict[str, object], layer_types: Sequence[str], model_window: int | None) -> CacheSettings:
    """CacheSettings from a Result's spec and attention layout."""

    def number(key: str, default: int) -> int:
        value = spec.get(key, default)
        return int(value) if isinstance(value, (int, float)) else default

    return CacheSettings(cache=str(spec.get("cache")), window=number("window", 256),
                         sink_tokens=number("sink_tokens", 4), cache_bits=number("cache_bits", 4),
                         residual_length=number("residual_length", 128), layer_types=tuple(layer_types),
                         model_window=model_window, backend=str(spec.get("backend", "torch")))

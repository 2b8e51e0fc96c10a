"""What a bounded or quantized KV cache still holds at a decoding step, position by position.

A pure function of the cache's settings, the model's layer layout and the step, so the page can draw it
without torch. Each cache type's rule is its registry entry's `retention`; `tests/unit/test_retention.py`
checks them against the keys the real cache objects hold.

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

from playground import registry

State = Literal["kept", "sink", "evicted", "quantized", "unwritten"]


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


@dataclass(frozen=True)
class Written:
    """What a retention rule is given: the settings and where the cache stands at the step drawn."""

    settings: CacheSettings
    prompt_tokens: int
    total: int  # positions drawn: the prompt and every new token
    n: int  # positions written so far
    sliding: int  # the model's own sliding layers
    full: int  # its other (global) layers

    def model_window_rows(self) -> list[CacheRow]:
        """The model's own sliding layers, which keep their window under any cache."""
        if not (self.sliding and self.settings.model_window):
            return []
        window = self.settings.model_window
        return [CacheRow(_count(self.sliding, "sliding ") + f" (window {window})",
                         _window(self.total, self.n, _slid(window, self.n)))]


def sink_rows(at: Written) -> list[CacheRow]:
    s = at.settings
    return [CacheRow(_count(at.full, "") + " (sinks + window)", _sink(at.total, at.n, s.sink_tokens, s.window))]


def quantized_rows(at: Written) -> list[CacheRow]:
    what = _count(at.full, "global " if at.sliding else "") + f" ({at.settings.cache_bits}-bit)"
    return [*at.model_window_rows(), CacheRow(what, _quantized(at.total, at.n, at.prompt_tokens, at.settings))]


def sliding_rows(at: Written) -> list[CacheRow]:
    """The model's own window where it has sliding layers (its global layers keep everything); else the
    imposed window on every layer."""
    if at.sliding:
        return [*at.model_window_rows(),
                CacheRow(_count(at.full, "global ") + " (no window)", _window(at.total, at.n, at.n))]
    kept = _slid(at.settings.window, at.n)
    return [CacheRow(_count(at.full, "") + f" (window {at.settings.window})", _window(at.total, at.n, kept))]


def retains(cache: str) -> bool:
    """Whether the cache keeps less than every position in full precision: the ones worth drawing."""
    return cache in registry.cache_names() and registry.cache_type(cache).retention is not None


def retention(settings: CacheSettings, prompt_tokens: int, new_tokens: int, step: int) -> list[CacheRow]:
    """Per group of layers, the state of each of the prompt_tokens + new_tokens positions at step `step`."""
    rule = registry.cache_type(settings.cache).retention if settings.cache in registry.cache_names() else None
    if rule is None:
        drawn = [c.name for c in registry.caches() if c.retention is not None]
        raise ValueError(f"retention is drawn for caches {tuple(drawn)}, not {settings.cache!r}")
    kinds = Counter(settings.layer_types)
    at = Written(settings, prompt_tokens, prompt_tokens + new_tokens, written(prompt_tokens, step),
                 kinds.get("sliding_attention", 0), kinds.get("full_attention", 0))
    return list(rule(at))


def settings_for(spec: dict[str, object], layer_types: Sequence[str], model_window: int | None) -> CacheSettings:
    """CacheSettings from a Result's spec and attention layout."""

    def number(key: str, default: int) -> int:
        value = spec.get(key, default)
        return int(value) if isinstance(value, (int, float)) else default

    return CacheSettings(cache=str(spec.get("cache")), window=number("window", 256),
                         sink_tokens=number("sink_tokens", 4), cache_bits=number("cache_bits", 4),
                         residual_length=number("residual_length", 128), layer_types=tuple(layer_types),
                         model_window=model_window, backend=str(spec.get("backend", "torch")))

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

Assisted decoding writes several tokens per forward pass: the last accepted token and the drafts, which the
main model then accepts or rejects. `verify_retention` draws the cache as such a pass leaves it, before its
rollback: what the cache held before the pass (the rule above), then the pass's tokens, all held. A bounded
ring has room for them past its window (PyTorch's caches grow by the pass and crop back; the JAX rings have
`spare` slots more), so no rejected draft displaces a position some window still needs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from playground import registry
from playground.registry.kv_store import kv_bits

State = Literal["kept", "sink", "evicted", "quantized", "unwritten", "accepted", "rejected"]


@dataclass(frozen=True, kw_only=True)
class CacheSettings:
    """The cache's own parameters (RunSpec names) and the model's layout that decides what it keeps."""

    cache: str
    window: int = 256  # sliding (imposed) and sink: keys held, sinks included for sink
    sink_tokens: int = 4
    cache_bits: int = 4
    cache_key_bits: int = 0  # 0: cache_bits
    cache_value_bits: int = 0
    residual_length: int = 128
    layer_types: tuple[str, ...] = ("full_attention",)
    model_window: int | None = None  # the model's own sliding window, when it has sliding layers
    backend: str = "torch"  # the quantized caches differ in which tokens stay full precision
    spare: int = 0  # JAX assisted decoding: ring slots past the window, for a verify pass's drafts


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
    residual = settings.residual_length
    ring = settings.backend == "jax"
    full = 0 if not kv_bits(settings).residual else min(n, residual) if ring else (n - prompt_tokens) % residual
    return tuple("unwritten" if i >= n else "kept" if i >= n - full else "quantized" for i in range(total))


def _slid(window: int, n: int) -> int:
    """Tokens a DynamicSlidingWindowLayer stores: the last W-1 (it slices `[-(W-1):]`, which for W=1 is all)."""
    return window - 1 if window > 1 else n


def _count(layers: int, what: str) -> str:
    return f"{layers} {what}layer{'' if layers == 1 else 's'}"


def _bounded(settings: CacheSettings, window: int) -> str:
    """A ring's size: its window, and the spare slots a verify pass writes its drafts into."""
    return f"window {window}" + (f" + {settings.spare} spare slots" if settings.spare else "")


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
        return [CacheRow(_count(self.sliding, "sliding ") + f" ({_bounded(self.settings, window)})",
                         _window(self.total, self.n, _slid(window, self.n)))]


def sink_rows(at: Written) -> list[CacheRow]:
    s = at.settings
    return [CacheRow(_count(at.full, "") + f" (sinks + recent, {_bounded(s, s.window)})",
                     _sink(at.total, at.n, s.sink_tokens, s.window))]


def quantized_rows(at: Written) -> list[CacheRow]:
    what = _count(at.full, "global " if at.sliding else "") + f" ({kv_bits(at.settings).label()})"
    return [*at.model_window_rows(), CacheRow(what, _quantized(at.total, at.n, at.prompt_tokens, at.settings))]


def sliding_rows(at: Written) -> list[CacheRow]:
    """The model's own window where it has sliding layers (its global layers keep everything); else the
    imposed window on every layer."""
    if at.sliding:
        return [*at.model_window_rows(),
                CacheRow(_count(at.full, "global ") + " (no window)", _window(at.total, at.n, at.n))]
    kept = _slid(at.settings.window, at.n)
    return [CacheRow(_count(at.full, "") + f" ({_bounded(at.settings, at.settings.window)})",
                     _window(at.total, at.n, kept))]


def retains(cache: str) -> bool:
    """Whether the cache keeps less than every position in full precision: the ones worth drawing."""
    return cache in registry.cache_names() and registry.cache_type(cache).retention is not None


def retention(settings: CacheSettings, prompt_tokens: int, new_tokens: int, step: int) -> list[CacheRow]:
    """Per group of layers, the state of each of the prompt_tokens + new_tokens positions at step `step`."""
    return _rows(settings, prompt_tokens, prompt_tokens + new_tokens, written(prompt_tokens, step))


def _rows(settings: CacheSettings, prompt_tokens: int, total: int, n: int) -> list[CacheRow]:
    """The cache's rows over `total` positions once `n` are written."""
    rule = registry.cache_type(settings.cache).retention if settings.cache in registry.cache_names() else None
    if rule is None:
        drawn = [c.name for c in registry.caches() if c.retention is not None]
        raise ValueError(f"retention is drawn for caches {tuple(drawn)}, not {settings.cache!r}")
    kinds = Counter(settings.layer_types)
    at = Written(settings, prompt_tokens, total, n, kinds.get("sliding_attention", 0), kinds.get("full_attention", 0))
    return list(rule(at))


@dataclass(frozen=True)
class VerifyPass:
    """One forward pass of assisted decoding: `drafted` tokens checked after the last accepted one, the first
    `accepted` of them kept; `before` new tokens came out of the passes before it."""

    before: int
    drafted: int
    accepted: int


def verify_retention(settings: CacheSettings, prompt_tokens: int, new_tokens: int,
                     verify: VerifyPass) -> list[CacheRow]:
    """Per group of layers, each position's state as a verify pass leaves the cache before rolling back.

    Positions before the pass's first token are what the cache held after the previous pass. The pass writes
    the last accepted token (the whole prompt, on a first pass) and its drafts, and holds all of them until
    the rollback: past its window, if need be, but never in a slot some window still reads. The drafts are
    drawn accepted or rejected; a rejected one's position is written again, with another token, later on.
    """
    if not verify.drafted:  # an ordinary step: the pass wrote one token and verified nothing
        return retention(settings, prompt_tokens, new_tokens, verify.before + 1)
    start = prompt_tokens + verify.before - 1 if verify.before else 0  # the pass's first position
    end = max(start + 1, prompt_tokens)  # past the token(s) it feeds; its drafts follow
    total = max(prompt_tokens + new_tokens, end + verify.drafted)  # a last pass may draft past the run's end
    accepted: list[State] = ["accepted"] * verify.accepted
    rejected: list[State] = ["rejected"] * (verify.drafted - verify.accepted)
    unwritten: list[State] = ["unwritten"] * (total - end - verify.drafted)
    rows = []
    for old, new in zip(_rows(settings, prompt_tokens, total, start), _rows(settings, prompt_tokens, total, end),
                        strict=True):
        held: list[State] = ["kept" if state == "evicted" else state for state in new.states[start:end]]
        rows.append(CacheRow(new.layers, (*old.states[:start], *held, *accepted, *rejected, *unwritten)))
    return rows


def settings_for(spec: dict[str, object], layer_types: Sequence[str], model_window: int | None,
                 spare: int = 0) -> CacheSettings:
    """CacheSettings from a Result's spec and attention layout (and a JAX assisted run's spare ring slots)."""

    def number(key: str, default: int) -> int:
        value = spec.get(key, default)
        return int(value) if isinstance(value, (int, float)) else default

    return CacheSettings(cache=str(spec.get("cache")), window=number("window", 256),
                         sink_tokens=number("sink_tokens", 4), cache_bits=number("cache_bits", 4),
                         cache_key_bits=number("cache_key_bits", 0), cache_value_bits=number("cache_value_bits", 0),
                         residual_length=number("residual_length", 128), layer_types=tuple(layer_types),
                         model_window=model_window, backend=str(spec.get("backend", "torch")), spare=spare)

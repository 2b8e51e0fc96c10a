"""RunSpec: the one frozen description of a run, validated in one place for UI, API and CLI."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from playground import registry
from playground.compatibility import WEIGHTS, check_combination
from playground.errors import PlaygroundError
from playground.limits import max_new_tokens_cap
from playground.registry import BACKENDS
from playground.registry.builtin import CACHE_BITS, MAX_BEAMS

__all__ = ["BACKENDS", "CACHE_BITS", "MAX_BEAMS", "WEIGHTS", "RunSpec", "max_new_tokens_cap"]

DEFAULT_MODEL = "smollm2-135m"
MAX_REPEATS = int(registry.knob("repeats").high or 1)


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Everything that decides what a run computes. Frozen and hashable, so it can key caches."""

    model: str = DEFAULT_MODEL
    strategy: str = "greedy"
    cache: str = "dynamic"
    backend: str = "torch"
    weights: str = "fp32"
    max_new_tokens: int = 64
    min_new_tokens: int = 0
    # sampling knobs; inert unless the strategy samples (its registry entry's `sampling`)
    temperature: float = 1.0
    top_k: int = 50  # 0 disables top-k filtering
    top_p: float = 1.0  # 1.0 disables nucleus filtering
    min_p: float = 0.0  # 0.0 disables min-p filtering
    repetition_penalty: float = 1.0  # 1.0 = no penalty; applies to every strategy
    seed: int = 0
    # beam search
    num_beams: int = 4
    length_penalty: float = 1.0
    early_stopping: bool = False
    num_return_sequences: int = 1
    # assisted decoding: a draft model, or n-gram lookup in the prompt (no draft model)
    assistant: str | None = None
    prompt_lookup: int = 0
    assisted_sampling: bool = False  # draw with the sampling knobs (speculative sampling) instead of greedily
    # cache knobs
    cache_bits: int = 4  # quantized cache: 2 or 4 (groups + full-precision residual), 8 (torch fp8, jax 8-bit groups)
    residual_length: int = 128  # quantized cache: newest tokens kept in full precision before quantizing
    window: int = 256  # sliding/sink: attention window in tokens
    sink_tokens: int = 4  # sink: first tokens kept forever (the "attention sinks")
    chat: bool | None = None  # None: apply the chat template when the model has one
    devices: int = 1  # JAX path: shard over this many devices
    repeats: int = 1  # timed runs of the same generation; metrics report their median and every run
    # forced first tokens after the prompt (branching at a token): generation continues from the last of them
    prefix_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.prefix_ids, list):  # what JSON gives; stored as a tuple so the spec stays hashable
            object.__setattr__(self, "prefix_ids", tuple(self.prefix_ids))
        _check_types(self)
        _check_ranges(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        """Build from JSON-like data; unknown keys are an error, missing keys take defaults."""
        if not isinstance(data, Mapping):
            raise PlaygroundError(f"spec must be a JSON object of RunSpec keys, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise PlaygroundError(f"unknown spec key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
        values = {k: _coerce(k, v) for k, v in data.items()}
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """Parse the API's spec string; an empty string means all defaults."""
        if text is None or not str(text).strip():
            return cls()
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError) as exc:
            raise PlaygroundError(f"spec is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc}); "
                                  'send an object such as {"strategy": "greedy"}') from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: prefix_ids as a list, as it arrives."""
        return {**dataclasses.asdict(self), "prefix_ids": list(self.prefix_ids)}

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)


_FIELD_TYPES: dict[str, type] = {
    "model": str, "strategy": str, "cache": str, "backend": str, "weights": str,
    "max_new_tokens": int, "min_new_tokens": int, "temperature": float, "top_k": int,
    "top_p": float, "min_p": float, "repetition_penalty": float, "seed": int, "num_beams": int,
    "length_penalty": float, "early_stopping": bool, "num_return_sequences": int,
    "assistant": str, "prompt_lookup": int, "assisted_sampling": bool, "cache_bits": int, "residual_length": int,
    "window": int, "sink_tokens": int, "chat": bool, "devices": int, "repeats": int, "prefix_ids": tuple,
}
_OPTIONAL = {"assistant", "chat"}


def _coerce(name: str, value: Any) -> Any:
    """Accept what JSON and argparse produce (2.0 for an int, 1 for a float); reject the rest."""
    kind = _FIELD_TYPES[name]
    if value is None and name in _OPTIONAL:
        return None
    if kind is int and isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is str and name == "assistant" and value == "":
        return None
    if kind is tuple and isinstance(value, list):
        return tuple(_coerce_id(v) for v in value)
    return value


def _coerce_id(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _check_types(spec: RunSpec) -> None:
    for name, kind in _FIELD_TYPES.items():
        value = getattr(spec, name)
        if value is None and name in _OPTIONAL:
            continue
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and ok and not math.isfinite(value):
            ok = False
        if not ok:
            want = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false",
                    tuple: "a list of token ids"}[kind]
            if name in _OPTIONAL:
                want += " or null"
            raise PlaygroundError(f"{name} must be {want}, got {value!r}")


def _one_of(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise PlaygroundError(f"{name} {value!r} is not one of: {', '.join(map(str, allowed))}")


def _in_range(name: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    if value < low or value > high or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise PlaygroundError(f"{name}={value} is out of range; allowed: {bracket}{low}, {high}]")


def _check_prefix(ids: tuple[Any, ...]) -> None:
    """Whole non-negative numbers, at most the token cap; the model's vocabulary is checked before it loads."""
    cap = max_new_tokens_cap()
    if len(ids) > cap:
        raise PlaygroundError(f"prefix_ids has {len(ids)} tokens; allowed: at most {cap} (PLAYGROUND_MAX_NEW_TOKENS)")
    for position, value in enumerate(ids):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PlaygroundError(f"prefix_ids[{position}]={value!r} is not a token id; "
                                  "allowed: whole numbers from 0 to the model's vocabulary size - 1")


def check_vocabulary(ids: tuple[int, ...], vocab_size: int, model: str) -> None:
    """Every forced id must index the model's embedding table."""
    for position, value in enumerate(ids):
        if value >= vocab_size:
            raise PlaygroundError(f"prefix_ids[{position}]={value} is outside {model}'s vocabulary; "
                                  f"allowed: 0 to {vocab_size - 1}")


def _check_knob(knob: registry.Knob, value: Any) -> None:
    if knob.choices:
        _one_of(knob.name, value, knob.choices)
    elif knob.low is not None and knob.high is not None:
        _in_range(knob.name, value, knob.low, knob.high, low_open=knob.low_open)


def _check_ranges(spec: RunSpec) -> None:
    _one_of("strategy", spec.strategy, registry.strategy_names())
    _one_of("cache", spec.cache, registry.cache_names())
    _one_of("backend", spec.backend, BACKENDS)
    _one_of("weights", spec.weights, WEIGHTS)
    if not spec.model.strip():
        raise PlaygroundError("model must not be empty; try smollm2-135m or gemma3-270m")
    if len(spec.model) > 512:
        raise PlaygroundError("model name is too long (over 512 characters)")
    cap = max_new_tokens_cap()
    _in_range("max_new_tokens", spec.max_new_tokens, 1, cap)
    _in_range("min_new_tokens", spec.min_new_tokens, 0, spec.max_new_tokens)
    for knob in registry.knobs():
        _check_knob(knob, getattr(spec, knob.name))
    _check_prefix(spec.prefix_ids)
    strategy, cache = registry.strategy(spec.strategy), registry.cache_type(spec.cache)
    if spec.assistant is not None and not spec.assistant.strip():
        raise PlaygroundError("assistant must be a model name or null")
    _check_unused(spec, strategy)
    for validate in (strategy.validate, cache.validate):
        if validate is not None:
            validate(spec)
    check_combination(spec)


def _readers(knob: str) -> str:
    return " or ".join(f"'{s.name}'" for s in registry.strategies() if knob in s.knobs)


def _check_unused(spec: RunSpec, strategy: registry.Strategy) -> None:
    """A strategy's own knobs keep their defaults under the other strategies, so a run never silently ignores
    what was asked of it."""
    if "num_return_sequences" not in strategy.knobs and spec.num_return_sequences != 1:
        raise PlaygroundError(
            f"num_return_sequences={spec.num_return_sequences} needs strategy {_readers('num_return_sequences')} "
            "(it returns the best num_return_sequences beams); other strategies return 1")
    drafting = ("assistant", "prompt_lookup", "assisted_sampling")
    if not set(drafting) & set(strategy.knobs) and (spec.assistant is not None or spec.prompt_lookup
                                                   or spec.assisted_sampling):
        raise PlaygroundError(f"assistant, prompt_lookup and assisted_sampling only apply to strategy "
                              f"{_readers('assistant')}")

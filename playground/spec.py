"""RunSpec: the one frozen description of a run, validated in one place for UI, API and CLI."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, fields
from typing import Any

from playground import registry
from playground.compatibility import WEIGHTS, check_combination, compile_refusal
from playground.errors import PlaygroundError
from playground.limits import max_new_tokens_cap
from playground.registry import chain
from playground.registry.builtin_knobs import CACHE_BITS, DRY_BREAKERS, MAX_BEAMS

__all__ = ["CACHE_BITS", "MAX_BEAMS", "WEIGHTS", "RunSpec", "max_new_tokens_cap"]

DEFAULT_MODEL = "smollm2-135m"
MAX_REPEATS = int(registry.knob("repeats").high or 1)
# True while RunSpec.for_lab builds a spec: knobs are checked against their lab ranges (Knob.lab_range)
_LAB_RANGES: ContextVar[bool] = ContextVar("lab_ranges", default=False)


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
    # the logits chain's sampling stages; inert unless the strategy samples (its registry entry's `sampling`).
    # Each knob's range, label and help are its registry record (playground/registry/builtin_knobs.py)
    temperature: float = 1.0
    top_k: int = 50  # 0 disables top-k filtering
    top_p: float = 1.0  # 1.0 disables nucleus filtering
    min_p: float = 0.0  # 0.0 disables min-p filtering
    typical_p: float = 1.0  # 1.0 disables typical sampling
    epsilon_cutoff: float = 0.0  # 0.0 disables it
    eta_cutoff: float = 0.0  # 0.0 disables it
    top_n_sigma: float = 0.0  # 0.0 disables it
    xtc_threshold: float = 0.1
    xtc_probability: float = 0.0  # 0.0 disables XTC
    dynatemp_range: float = 0.0  # 0.0: the fixed temperature; else llama.cpp's dynamic temperature replaces it
    dynatemp_exponent: float = 1.0
    top_a: float = 0.0  # 0.0 disables top-a
    p_less: int = 0  # 0 off, 1 p-less, 2 p-less-norm
    mirostat_tau: float = 0.0  # 0.0 disables mirostat v2 (sampling only: μ follows one sequence)
    mirostat_eta: float = 0.1
    adaptive_target: float = 0.0  # 0.0 disables adaptive-p (sampling only: its average follows one sequence)
    adaptive_decay: float = 0.9
    sampler_order: str = ""  # "": the default order; else stage names, comma-separated (playground/registry/chain.py)
    # the chain's first stage, every strategy: the output must match a regex, JSON schema, choices or Lark grammar
    constraint: str = "none"
    constraint_text: str = ""
    # the chain's processors: every strategy
    repetition_penalty: float = 1.0  # 1.0 = no penalty
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    no_repeat_ngram_size: int = 0  # 0 = off
    dry_multiplier: float = 0.0  # 0.0 disables DRY
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_sequence_breakers: str = DRY_BREAKERS  # a JSON list of strings
    logit_bias: str = ""  # a JSON object {token id: bias}; "": no bias
    seed: int = 0
    # the strategies' own knobs (each entry's `knobs` names those it reads)
    num_beams: int = 4
    length_penalty: float = 1.0
    early_stopping: bool = False
    num_beam_groups: int = 2  # groups of num_beams / num_beam_groups beams each
    diversity_penalty: float = 1.0  # per earlier group that chose the token at this step
    penalty_alpha: float = 0.6  # the degeneration penalty's weight (candidates: top_k)
    dola_layers: str = "high"  # "low", "high" or comma-separated layer indices
    num_return_sequences: int = 1
    # a draft model, or n-gram lookup in the prompt (no draft model)
    assistant: str | None = None
    prompt_lookup: int = 0
    assisted_sampling: bool = False  # verify drafts drawn with the sampling knobs instead of greedily
    # cache knobs
    cache_bits: int = 4  # quantized cache: 2 or 4 (groups + full-precision residual), 8 (torch fp8, jax 8-bit groups)
    cache_key_bits: int = 0  # quantized cache: the keys' own bits (0: cache_bits)
    cache_value_bits: int = 0  # quantized cache: the values' own bits (0: cache_bits)
    residual_length: int = 128  # quantized cache: newest tokens kept in full precision before quantizing
    cache_dtype: str = "fp32"  # dynamic, static, sliding, sink: the store's dtype ("bf16": half the bytes)
    window: int = 256  # sliding/sink: attention window in tokens
    sink_tokens: int = 4  # sink: first tokens kept forever (the "attention sinks")
    chat: bool | None = None  # None: apply the chat template when the model has one
    devices: int = 1  # JAX path: shard over this many devices
    repeats: int = 1  # timed runs of the same generation; metrics report their median and every run
    reuse: bool = True  # start from the prefix store's longest kept prefix, where the cache is exact under reuse
    # PyTorch path: "off" (eager), or a torch.compile mode for generate's decode step over the static cache
    torch_compile: str = "off"
    # forced first tokens after the prompt (branching at a token): generation continues from the last of them
    prefix_ids: tuple[int, ...] = ()
    # JAX: the programs sized for this many tokens after the prompt, prefix included (a step of a branch tree
    # sized for the whole tree, so that no step compiles); 0: for this request alone
    sized_new_tokens: int = 0
    # (name, value) of knobs registered beyond these fields (a plug-in's stage of the logits chain), sorted by
    # name; read as attributes (spec.name) and written flat in to_dict(), like any other key
    extra_knobs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.prefix_ids, list):  # what JSON gives; stored as a tuple so the spec stays hashable
            object.__setattr__(self, "prefix_ids", tuple(self.prefix_ids))
        object.__setattr__(self, "extra_knobs", tuple(sorted(dict(self.extra_knobs).items())))
        _check_types(self)
        _check_ranges(self)

    def __getattr__(self, name: str) -> Any:
        """A knob registered beyond the fields: its value here, else its default."""
        if name.startswith("__") or not registry.has_knob(name):
            raise AttributeError(name)
        return dict(self.__dict__.get("extra_knobs", ())).get(name, registry.knob(name).default)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        """Build from JSON-like data; unknown keys are an error, missing keys take defaults."""
        if not isinstance(data, Mapping):
            raise PlaygroundError(f"spec must be a JSON object of RunSpec keys, got {type(data).__name__}")
        known = set(spec_keys())
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise PlaygroundError(f"unknown spec key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
        return cls(**_split_extras({k: _coerce(k, v) for k, v in data.items()}))

    @classmethod
    def for_lab(cls, data: Mapping[str, Any]) -> RunSpec:
        """The sampler lab's spec: as from_dict, but each knob checked against its lab range, which reaches the
        edges of a stage's definition that a run refuses (a temperature of 0, penalties of 50). Only the lab's
        backend modules apply such a spec; a run never sees one."""
        token = _LAB_RANGES.set(True)
        try:
            return cls.from_dict(data)
        finally:
            _LAB_RANGES.reset(token)

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
        """JSON-ready and flat: prefix_ids as a list, as it arrives; every registered knob by its name."""
        data = {**dataclasses.asdict(self), "prefix_ids": list(self.prefix_ids)}
        del data["extra_knobs"]
        return {**data, **{name: getattr(self, name) for name in _extra_names()}}

    def replace(self, **changes: Any) -> RunSpec:
        own = _split_extras(changes)
        extras = own.pop("extra_knobs", ())
        return dataclasses.replace(self, **own, extra_knobs=(*self.extra_knobs, *extras))


# the fields that are not knobs of the registry, with their types; a knob's type is its record's `kind`
_OWN_TYPES: dict[str, type] = {"model": str, "strategy": str, "cache": str, "backend": str, "weights": str,
                               "chat": bool, "prefix_ids": tuple}
_OPTIONAL = {"assistant", "chat"}


def _field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(RunSpec) if f.name != "extra_knobs")


def _extra_names() -> tuple[str, ...]:
    """Registered knobs that are not RunSpec fields (a plug-in's)."""
    own = set(_field_names())
    return tuple(knob.name for knob in registry.knobs() if knob.name not in own)


def spec_keys() -> tuple[str, ...]:
    """Every key a spec takes: RunSpec's fields, then the knobs registered beyond them."""
    return (*_field_names(), *_extra_names())


def _split_extras(values: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for RunSpec: the values of knobs beyond its fields gathered into `extra_knobs`."""
    extras = {k: v for k, v in values.items() if k in _extra_names()}
    own = {k: v for k, v in values.items() if k not in extras}
    return {**own, "extra_knobs": tuple(extras.items())} if extras else own


def _kind(name: str) -> type:
    return _OWN_TYPES[name] if name in _OWN_TYPES else registry.knob(name).kind


def _coerce(name: str, value: Any) -> Any:
    """Accept what JSON and argparse produce (2.0 for an int, 1 for a float); reject the rest."""
    kind = _kind(name)
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
    for name in spec_keys():
        kind, value = _kind(name), getattr(spec, name)
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
        opening = "(" if low_open or low == -math.inf else "["
        closing = ")" if high == math.inf else "]"
        raise PlaygroundError(f"{name}={value} is out of range; allowed: {opening}{low}, {high}{closing}")


def _check_prefix(ids: tuple[Any, ...]) -> None:
    """Whole non-negative numbers, at most the token cap; the model's vocabulary is checked before it loads."""
    cap = max_new_tokens_cap()
    if len(ids) > cap:
        raise PlaygroundError(f"prefix_ids has {len(ids)} tokens; allowed: at most {cap} (PLAYGROUND_MAX_NEW_TOKENS)")
    for position, value in enumerate(ids):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PlaygroundError(f"prefix_ids[{position}]={value!r} is not a token id; "
                                  "allowed: whole numbers from 0 to the model's vocabulary size - 1")


def _check_sizing(spec: RunSpec) -> None:
    """A tree's budget holds the step sized by it (its prefix and its new tokens); only the JAX path compiles
    programs for a length."""
    if not spec.sized_new_tokens:
        return
    if spec.backend != "jax":
        raise PlaygroundError(f"sized_new_tokens={spec.sized_new_tokens} sizes the JAX path's programs; allowed "
                              f"with backend {spec.backend}: 0")
    low, cap = len(spec.prefix_ids) + spec.max_new_tokens, max_new_tokens_cap()
    if not low <= spec.sized_new_tokens <= cap:
        raise PlaygroundError(f"sized_new_tokens={spec.sized_new_tokens} is out of range; allowed: 0, or from {low} "
                              f"(prefix_ids' {len(spec.prefix_ids)} tokens + max_new_tokens) to {cap}")


def check_vocabulary(ids: tuple[int, ...], vocab_size: int, model: str, field: str = "prefix_ids") -> None:
    """Every forced (or biased) id must index the model's embedding table."""
    for position, value in enumerate(ids):
        if value >= vocab_size:
            where = f"{field}[{position}]={value}" if field == "prefix_ids" else f"{field} token {value}"
            raise PlaygroundError(f"{where} is outside {model}'s vocabulary; allowed: 0 to {vocab_size - 1}")


def _check_knob(knob: registry.Knob, value: Any) -> None:
    if knob.choices:
        _one_of(knob.name, value, knob.choices)
    elif _LAB_RANGES.get() and knob.lab_range is not None:
        low, high, low_open = knob.lab_range
        _in_range(knob.name, value, low, high, low_open=low_open)
    elif knob.low is not None and knob.high is not None:
        _in_range(knob.name, value, knob.low, knob.high, low_open=knob.low_open)


def _check_ranges(spec: RunSpec) -> None:
    _one_of("strategy", spec.strategy, registry.strategy_names())
    _one_of("cache", spec.cache, registry.cache_names())
    _one_of("backend", spec.backend, registry.backend_names())
    _one_of("weights", spec.weights, WEIGHTS)
    if not spec.model.strip():
        raise PlaygroundError("model must not be empty; try smollm2-135m or gemma3-270m")
    if len(spec.model) > 512:
        raise PlaygroundError("model name is too long (over 512 characters)")
    cap = max_new_tokens_cap()
    _in_range("max_new_tokens", spec.max_new_tokens, 1, cap)
    # a forced prefix counts as output (a branch continues its run), so min_new_tokens may reach over it
    _in_range("min_new_tokens", spec.min_new_tokens, 0, len(spec.prefix_ids) + spec.max_new_tokens)
    for knob in registry.knobs():
        _check_knob(knob, getattr(spec, knob.name))
    _check_prefix(spec.prefix_ids)
    _check_sizing(spec)
    chain.parse_order(spec.sampler_order)
    strategy, cache = registry.strategy(spec.strategy), registry.cache_type(spec.cache)
    if spec.assistant is not None and not spec.assistant.strip():
        raise PlaygroundError("assistant must be a model name or null")
    _check_unused(spec, strategy)
    for validate in (strategy.validate, cache.validate, *(stage.validate for stage in registry.processors())):
        if validate is not None:
            validate(spec)
    check_combination(spec)
    _check_chain(spec)
    why = compile_refusal(spec.torch_compile, spec.backend, spec.strategy, spec.cache, spec.weights)
    if why is not None:
        raise PlaygroundError(f"torch_compile={spec.torch_compile!r} cannot run: {why}")


def _readers(knob: str) -> str:
    return " or ".join(f"'{s.name}'" for s in registry.strategies() if knob in s.knobs)


def _check_unused(spec: RunSpec, strategy: registry.Strategy) -> None:
    """A knob that only some strategies read, set under one that does not, is refused where its record says
    why (`Knob.unread`), so a run never silently ignores what was asked of it."""
    for knob in registry.knobs():
        value = getattr(spec, knob.name)
        if knob.unread and knob.name not in strategy.knobs and value != knob.default:
            raise PlaygroundError(f"{knob.name}={value!r} needs strategy {_readers(knob.name)} ({knob.unread}); "
                                  f"strategy {spec.strategy!r} does not read it")


def _check_chain(spec: RunSpec) -> None:
    """A stage of the logits chain registered without a side on the run's backend cannot run there: refused here,
    before anything loads, rather than when that backend builds its chain."""
    for stage in chain.stages(spec):
        if stage.plugin(spec.backend) is None:
            others = " or ".join(f"'{b}'" for b in registry.backend_names() if stage.plugin(b) is not None)
            raise PlaygroundError(f"backend={spec.backend} cannot run the logits chain's stage {stage.name!r}: it "
                                  f"has no {registry.backend_type(spec.backend).label} side yet; use backend "
                                  f"{others}, or leave the stage off")

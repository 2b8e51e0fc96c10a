"""The records a capability is described by: a knob, a KV-cache type and a decoding strategy.

Entries are data. What a cache or a strategy does on a backend is a callable the entry holds; the built-in
entries name theirs by module path (`lazy`), so reading the registry imports neither torch nor jax.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# A playground.spec.RunSpec: RunSpec validates against the registry, so the registry cannot import it
RunSpec = Any
BACKENDS = ("torch", "jax")


@dataclass(frozen=True, kw_only=True)
class Knob:
    """A RunSpec key a cache or strategy reads, with its range (RunSpec refuses values outside it)."""

    name: str
    low: float | None = None  # None: no numeric range (a choice, a flag, a name)
    high: float | None = None
    low_open: bool = False  # the low end itself is refused (a temperature of 0 divides by zero)
    choices: tuple[Any, ...] = ()  # the only values allowed, when not empty
    # the value sets an array shape on the JAX path, so each new value compiles new programs; other knobs are
    # arguments of the compiled programs and cost no compile
    shapes: bool = False


def lazy(module: str, name: str) -> Callable[..., Any]:
    """A callable that imports `module` on its first call: entries can name torch or jax code without importing
    it when the page starts."""
    target: list[Callable[..., Any]] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not target:
            target.append(getattr(importlib.import_module(module), name))
        return target[0](*args, **kwargs)

    call.__qualname__ = call.__name__ = f"{module}.{name}"
    return call


@dataclass(frozen=True, kw_only=True)
class CacheType:
    """A KV-cache type: how each backend builds it, what it refuses, and what the page shows of it."""

    name: str
    label: str  # the page's dropdown entry
    help: str  # one sentence: what the cache keeps
    knobs: tuple[str, ...] = ()  # the RunSpec keys it reads (the page shows them when this cache is chosen)
    # torch: (spec, model, prompt_tokens) -> a transformers Cache for one run
    torch: Callable[[RunSpec, Any, int], Any]
    # jax: (spec, text_config, model_has_sliding_layers, length) -> the Layout of every global layer (the
    # model's own sliding layers keep their ring); the layout is part of the compile key
    jax: Callable[[RunSpec, Any, bool, int], Any]
    # torch: (spec, progress) -> seconds of one-time work the cache needs before a run (building its kernels),
    # reported as the run's compile time; None: nothing to prepare
    torch_prepare: Callable[[RunSpec, Any], float] | None = None
    # jax: one length for prompt + every new token, allocated up front; otherwise the cache grows by doubling
    preallocated: bool = False
    # backend -> why a verify pass's rejected drafts cannot be rolled back exactly on it; a backend absent here
    # rolls back exactly, so assisted decoding runs there
    no_rollback: Mapping[str, str] = field(default_factory=dict)
    # (spec, text_config, layer_types) -> raise ValueError(reason) for a model this cache cannot serve; called
    # from the config alone, before the weights load
    check_model: Callable[[RunSpec, Any, list[str]], None] | None = None
    # (spec) -> raise PlaygroundError for knob values that contradict each other
    validate: Callable[[RunSpec], None] | None = None
    # (settings, layout) -> rows of the page's cache strip (playground.retention); None: it keeps every
    # position in full precision, so there is nothing to draw
    retention: Callable[..., Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """A decoding strategy: its knobs, how each backend runs it, and what it asks of the cache."""

    name: str
    label: str
    help: str
    knobs: tuple[str, ...] = ()
    # whether the sampling knobs apply: "always", "never", or "optional" (the `assisted_sampling` switch decides)
    sampling: str = "never"
    # (spec) -> raise PlaygroundError for knob values that contradict each other
    validate: Callable[[RunSpec], None] | None = None
    # torch: (spec, GenerationConfig) -> None, setting what this strategy adds to transformers' config
    torch_config: Callable[[RunSpec, Any], None] | None = None
    # what the torch path records per step: "tokens" (a distribution per token), "beams" (the beam tree) or
    # "drafts" (verification steps); beam search streams nothing until it ends
    records: str = "tokens"
    # jax: (spec, draft model or None) -> the plug-in the JAX request loop runs for one request
    # (playground/backends/jax/strategy.py says what a plug-in provides)
    jax: Callable[[RunSpec, Any], Any]
    # the RunSpec key holding how many sequences the cache keeps a row for (beam search: num_beams); None: one
    rows_knob: str | None = None
    # verifies several drafted tokens per pass, so the cache must roll rejected ones back (CacheType.no_rollback)
    drafts: bool = False

    def samples(self, assisted_sampling: bool) -> bool:
        """Whether the sampling knobs (temperature, top-k, top-p, min-p) change what this strategy computes."""
        return self.sampling == "always" or (self.sampling == "optional" and bool(assisted_sampling))

    def rows(self, spec: RunSpec) -> int:
        """Sequences decoded side by side, each with its own cache row."""
        return int(getattr(spec, self.rows_knob)) if self.rows_knob else 1

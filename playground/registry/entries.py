"""The records a capability is described by: a knob, a KV-cache type and a decoding strategy.

Entries are data. What a cache or a strategy does on a backend is a callable the entry holds; the built-in
entries name theirs by module path (`lazy`), so reading the registry imports neither torch nor jax.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from playground.registry.records import RunRecords, TokenRecords

# A playground.spec.RunSpec: RunSpec validates against the registry, so the registry cannot import it
RunSpec = Any
# backend name -> that backend's side of an entry; a backend absent from an entry's mapping cannot run it
Plugins = Mapping[str, Callable[..., Any]]


class Range(NamedTuple):
    """The values a numeric knob takes: [low, high], or (low, high] with low_open; an end may be infinite."""

    low: float
    high: float
    low_open: bool = False


@dataclass(frozen=True, kw_only=True)
class Knob:
    """A RunSpec key that a cache, a strategy or a stage of the logits chain reads: its type, default and range
    (RunSpec refuses values outside it), and how the page, the CLI and the sweep present it. Everything that
    lists knobs derives from these records (a test checks RunSpec's own fields against them)."""

    name: str
    kind: type = float  # the value's type: int, float, bool or str
    default: Any = None
    low: float | None = None  # None: no numeric range (a choice, a flag, a name)
    high: float | None = None
    low_open: bool = False  # the low end itself is refused (a temperature of 0 divides by zero)
    choices: tuple[Any, ...] = ()  # the only values allowed, when not empty
    # the value sets an array shape on the JAX path, so each new value compiles new programs; other knobs are
    # arguments of the compiled programs and cost no compile
    shapes: bool = False
    group: str = ""  # the column card's group of generic widgets that shows it; "": drawn by its own code
    label: str = ""  # the widget's label (the name when empty)
    help: str = ""  # one line under the widget and in the CLI's --help
    step: float | None = None  # a slider over [low, high] with this step; None: a number box or text box
    sweep: str = ""  # the measure a sweep of this knob plots against speed; "": a sweep cannot move it
    # the sampler lab's range where the stage's definition reaches past run's (a temperature of 0 is greedy, a
    # repetition penalty of 50 is llama.cpp's test value); None: the lab takes run's range
    lab: Range | None = None
    # why a value other than the default is refused under a strategy that does not read the knob ("": ignored
    # there, as the page sends every knob of every column): set where ignoring it would give another run than asked
    unread: str = ""

    @property
    def title(self) -> str:
        return self.label or self.name

    @property
    def lab_range(self) -> Range | None:
        """The range the sampler lab checks: its own where it has one, else run's (None: not numeric)."""
        if self.lab is not None:
            return self.lab
        if self.low is None or self.high is None:
            return None
        return Range(self.low, self.high, self.low_open)

    def parse(self, text: str) -> Any:
        """A value written as text (a sweep's list, a CLI flag): whole numbers for an int knob."""
        return self.kind(text) if self.kind in (int, float, str) else text


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
class BackendType:
    """A way to run a RunSpec (PyTorch's model.generate, the jitted JAX decoder): registered once, named by every
    entry that has a plug-in for it (`impl`). Adding one touches no other entry: the entries it runs gain its name
    in their mapping where it registers, and the registry's rules refuse the rest."""

    name: str
    label: str  # how refusals and the page name it: "PyTorch", "JAX"
    # () -> the playground.backends.base.Backend that runs a request (its module imports neither torch nor jax)
    make: Callable[[], Any]
    # the RunSpec keys only this backend reads (the column card shows them when it is chosen)
    knobs: tuple[str, ...] = ()
    # () -> weights -> why this backend refuses those weights on this process's device; None: it refuses none
    weights_refusals: Callable[[], Mapping[str, str]] | None = None
    # the module of its side of the sampler lab (`stage_logits`: a given distribution through the chain); "": none
    lab: str = ""


@dataclass(frozen=True, kw_only=True)
class Processor:
    """One stage of the logits chain: what turns the model's logits into the distribution a token is taken from.

    Stages run in one order (the registration order, or the `sampler_order` knob's) on both backends: on PyTorch
    as one LogitsProcessorList, on JAX as one function in every program that picks or scores tokens (steps,
    verify passes, beam steps, draft models). A stage that is not `active` for a spec is left out of the chain.
    """

    name: str
    label: str  # the sampling-cut view's name for it, formatted with the spec's values: "top-k (k={top_k})"
    help: str
    knobs: tuple[str, ...] = ()  # the RunSpec keys it reads (the page shows them with the chain's group)
    # True: a sampling filter or warper, applied only when the strategy samples; False: a processor that changes
    # the scores of every strategy (penalties, bans), greedy and beam search included (beam: on log-probabilities)
    samples_only: bool = True
    # (spec) -> whether the stage is in the chain for these settings (a top-p of 1.0 removes nothing)
    active: Callable[[RunSpec], bool]
    # backend -> its side of the stage: "torch": (spec, playground.backends.torch.chain.TorchContext) -> a
    # transformers LogitsProcessor; "jax": () -> the JAX stage (playground.backends.jax.chain.chain.JaxStage: its
    # compile key, traced arguments, jnp function). A backend absent here refuses a run whose chain holds the stage
    impl: Plugins
    # (spec) -> raise PlaygroundError for knob values that contradict each other
    validate: Callable[[RunSpec], None] | None = None
    # (spec) -> True where the stage stays in the chain (so that its value is a traced argument and a new one
    # compiles nothing) but does nothing with these values: descriptions and the cut view leave it out
    idle: Callable[[RunSpec], bool] | None = None
    # the only strategies it runs with, and why ((): every strategy its samples_only allows); its `validate`
    # refuses the others, and the column card disables its knobs there with the reason
    strategies: tuple[str, ...] = ()
    strategies_why: str = ""

    def runs_with(self, strategy: str) -> bool:
        """Whether the stage can run with `strategy` (its knobs can be set)."""
        return not self.strategies or strategy in self.strategies

    def plugin(self, backend: str) -> Callable[..., Any] | None:
        """This stage's side on `backend`; None: that backend cannot run it."""
        return self.impl.get(backend)

    def shown(self, spec: RunSpec) -> bool:
        """Whether descriptions of this run name the stage."""
        return self.idle is None or not self.idle(spec)

    def describe(self, spec: RunSpec) -> str:
        """The label with the column's values filled in."""
        return self.label.format(**{name: getattr(spec, name) for name in self.knobs})


@dataclass(frozen=True, kw_only=True)
class CacheType:
    """A KV-cache type: how each backend builds it, what it refuses, and what the page shows of it."""

    name: str
    label: str  # the page's dropdown entry
    help: str  # one sentence: what the cache keeps
    knobs: tuple[str, ...] = ()  # the RunSpec keys it reads (the page shows them when this cache is chosen)
    # backend -> how it builds the cache: "torch": (spec, model, prompt_tokens) -> a transformers Cache for one
    # run; "jax": (spec, text_config, model_has_sliding_layers, length) -> the Layout of every global layer (the
    # model's own sliding layers keep their ring; the layout is part of the compile key). A backend absent here
    # refuses the cache
    impl: Plugins
    # backend -> (spec, progress) -> seconds of one-time work the cache needs there before a run (building its
    # kernels), reported as the run's compile time; a backend absent here has nothing to prepare
    prepare: Plugins = field(default_factory=dict)
    # one length for prompt + every new token, allocated up front; otherwise the cache grows (by doubling on JAX)
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

    def plugin(self, backend: str) -> Callable[..., Any] | None:
        """How `backend` builds this cache; None: that backend cannot."""
        return self.impl.get(backend)


class CacheNeed(NamedTuple):
    """The only caches a strategy's loop runs on, on one backend, and why."""

    caches: tuple[str, ...]
    why: str


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """A decoding strategy: its knobs, how each backend runs it, and what it asks of the cache."""

    name: str
    label: str
    help: str
    knobs: tuple[str, ...] = ()
    # whether the sampling knobs apply: "always", "never", or "optional" (the `assisted_sampling` switch decides)
    sampling: str = "never"
    # how the token is chosen after the logits chain when it is not drawn (the sampling cut's last words)
    picks: str = "the most likely token is taken"
    # (spec) -> raise PlaygroundError for knob values that contradict each other
    validate: Callable[[RunSpec], None] | None = None
    # backend -> the factory of its plug-in for one request; a backend absent here refuses the strategy.
    # "torch": (spec) -> the plug-in the PyTorch path's model.generate call runs: its settings of transformers'
    # config, its loop, what it records (playground/backends/torch/strategy.py says what a plug-in provides);
    # "jax": (spec, draft model or None) -> the plug-in the JAX request loop runs
    # (playground/backends/jax/strategy.py says what a plug-in provides)
    impl: Plugins
    # one sequence, one forward per token and nothing else per step: transformers' own `_sample` loop on PyTorch
    # (the loop torch.compile compiles) and a model's plain decode cost
    plain: bool = False
    # backend -> the caches its plug-in's loop runs on there, and why not the others (the method's own need); a
    # backend absent here runs it on every cache
    cache_need: Mapping[str, CacheNeed] = field(default_factory=dict)
    # (spec, text_config, layer_types) -> raise ValueError(reason) for a model this strategy cannot run; called
    # from the config alone, before the weights load (as a cache's check_model is)
    check_model: Callable[[RunSpec, Any, list[str]], None] | None = None
    # the RunSpec key holding how many sequences the cache keeps a row for (beam search: num_beams); None: one
    rows_knob: str | None = None
    # the RunSpec key holding how many cache rows the torch loop holds at its peak, where that is not rows_knob
    # (contrastive search: its top_k candidates, one row each, during every step's scoring pass); None: rows()
    peak_rows_knob: str | None = None
    # verifies several drafted tokens per pass, so the cache must roll rejected ones back (CacheType.no_rollback)
    drafts: bool = False
    # what it records beside every strategy's token records, and where each lands in the Result (records.py)
    token_records: tuple[TokenRecords, ...] = ()
    run_records: tuple[RunRecords, ...] = ()
    # () -> how the page draws those records (a playground.ui.strategy_view.StrategyView), named by
    # lazy("module", "name") so that the registry imports nothing of the page; None: nothing of its own
    view: Callable[[], Any] | None = None

    def plugin(self, backend: str) -> Callable[..., Any] | None:
        """The factory of this strategy's plug-in on `backend`; None: that backend refuses it."""
        return self.impl.get(backend)

    def samples(self, assisted_sampling: bool) -> bool:
        """Whether the sampling stages of the logits chain (temperature, top-k, ...) apply to this strategy."""
        return self.sampling == "always" or (self.sampling == "optional" and bool(assisted_sampling))

    def rows(self, spec: RunSpec) -> int:
        """Sequences decoded side by side, each with its own cache row."""
        return int(getattr(spec, self.rows_knob)) if self.rows_knob else 1

    def peak_rows(self, spec: RunSpec) -> int:
        """Cache rows held at once at the peak of a step: what the memory budget must make room for."""
        return int(getattr(spec, self.peak_rows_knob)) if self.peak_rows_knob else self.rows(spec)

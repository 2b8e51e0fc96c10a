"""Which strategy works with which cache on which backend, and why the others are refused up front.

Derived from the registry: a strategy that verifies drafts needs a cache that rolls rejected ones back on that
backend (`CacheType.no_rollback`). Model-dependent refusals (sink on a model with sliding layers) belong to
the cache entries and are checked once the model's config is known.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from playground import registry
from playground.errors import PlaygroundError

WEIGHTS = ("fp32", "bf16", "int8", "nf4", "q4")
# what a precision's name does not say by itself (the page's weights menu): its form and bytes per weight
WEIGHT_LABELS = {"q4": "q4: 4-bit layers, scale + min per 32 (0.75 B/weight); int8 head"}


class Combination(Protocol):
    """The settings that decide whether a run can happen at all (RunSpec has them)."""

    @property
    def backend(self) -> str: ...
    @property
    def strategy(self) -> str: ...
    @property
    def cache(self) -> str: ...
    @property
    def weights(self) -> str: ...
    @property
    def devices(self) -> int: ...


def _instead(backend: str, cache: str) -> str:
    """What to pick instead for a drafting strategy: the caches that roll back on this backend, and the
    backends where this cache does."""
    caches = [c.name for c in registry.caches() if backend not in c.no_rollback]
    others = [b for b in registry.backend_names() if b != backend and b not in registry.cache_type(cache).no_rollback]
    advice = "use cache " + " or ".join(f"'{c}'" for c in caches)
    return advice + "".join(f", or backend '{b}'" for b in others)


def _backends_with(has: Callable[[str], object]) -> str:
    """'backend ...' naming the backends for which `has` holds ('no backend' where none does)."""
    names = [f"'{b}'" for b in registry.backend_names() if has(b)]
    return "backend " + " or ".join(names) if names else "no backend"


def refusal(backend: str, strategy: str, cache: str) -> str | None:
    """The reason a combination cannot run, or None when it can: a strategy or a cache runs on a backend its entry
    names a plug-in for, on the caches its loop needs there, and a drafting one on a cache that rolls back."""
    entry = registry.strategy(strategy)
    where = registry.backend_type(backend).label
    if entry.plugin(backend) is None:
        return f"{entry.label} has no plug-in on the {where} path; {_backends_with(entry.plugin)} runs it"
    cache_entry = registry.cache_type(cache)
    if cache_entry.plugin(backend) is None:
        others = [c.name for c in registry.caches() if c.plugin(backend) is not None]
        return (f"the {cache_entry.label} cache has no side on the {where} path; use cache "
                + " or ".join(f"'{c}'" for c in others) + f"; {_backends_with(cache_entry.plugin)} builds it")
    need = entry.cache_need.get(backend)
    if need is not None and cache not in need.caches:
        return f"{need.why}; use cache " + " or ".join(f"'{c}'" for c in need.caches)
    if not entry.drafts:
        return None
    why = registry.cache_type(cache).no_rollback.get(backend)
    return None if why is None else f"{why}; {_instead(backend, cache)}"


def weights_refusal(backend: str, weights: str) -> str | None:
    """Why `weights` cannot run on `backend` on this process's device, or None when they can."""
    refusals = registry.backend_type(backend).weights_refusals
    return None if refusals is None else refusals().get(weights)


# Weights transformers' generate will not compile: bitsandbytes' quantizers say they are not compileable
# (HfQuantizer.is_compileable), so a compile config would be ignored and the column would run eager unsaid
NOT_COMPILED_WEIGHTS = ("int8", "nf4")


def compile_refusal(mode: str, backend: str, strategy: str, cache: str, weights: str) -> str | None:
    """Why torch.compile (`torch_compile=mode`) cannot run with these settings, or None when it can (or is off).

    transformers' generate compiles only what `_valid_auto_compile_criteria` lets through, and refusing the rest
    here keeps a "torch.compile" column from silently running eager: a cache of fixed shapes (a preallocated one:
    the others grow or evict, and each new shape would compile again), the one-token-per-step loop (`_sample`:
    beam search and assisted decoding call the model eager), and weights its quantizer lets it compile."""
    if mode == "off":
        return None
    if backend != "torch":
        return (f"torch.compile is PyTorch's compiler, for backend 'torch'; backend '{backend}' is compiled by "
                "XLA already: set torch_compile to 'off'")
    fixed = [c.name for c in registry.caches() if c.preallocated]
    if cache not in fixed:
        return (f"torch.compile needs the static cache's fixed shapes (transformers compiles generate's forward "
                f"only over a preallocated cache; cache '{cache}' changes shape as it grows or evicts): use cache "
                + " or ".join(f"'{c}'" for c in fixed))
    plain = [s.name for s in registry.strategies() if s.plain]
    if strategy not in plain:
        return (f"transformers compiles only the one-token-per-step decode loop, and strategy '{strategy}' calls "
                "the model eager (beam search, assisted decoding and the guide's methods have loops of their own): use "
                "strategy "
                + " or ".join(f"'{s}'" for s in plain))
    if weights in NOT_COMPILED_WEIGHTS:
        return (f"transformers compiles no bitsandbytes-quantized model ({weights} weights); use fp32 or bf16 "
                "weights")
    return None


def check_combination(spec: Combination) -> None:
    """Raise the PlaygroundError users see for a combination that cannot run, naming what to pick instead."""
    reason = refusal(spec.backend, spec.strategy, spec.cache)
    if reason is not None:
        raise PlaygroundError(
            f"backend={spec.backend} strategy={spec.strategy} cache={spec.cache} cannot run: {reason}"
        )
    why = weights_refusal(spec.backend, spec.weights)
    if why is not None:
        others = [f"'{b}'" for b in registry.backend_names()
                  if b != spec.backend and weights_refusal(b, spec.weights) is None]
        where = f", or backend {' or '.join(others)}" if others else ""
        raise PlaygroundError(f"backend={spec.backend} weights={spec.weights} cannot run: {why}{where}")
    if spec.weights == "q4" and spec.devices != 1:
        raise PlaygroundError(f"weights=q4 runs on one device (its bytes pair row r with row r + N/2, which a "
                              f"split by rows would part); devices={spec.devices}: use int8 or fp32 weights")
    if spec.devices != 1 and "devices" not in registry.backend_type(spec.backend).knobs:
        raise PlaygroundError(f"devices > 1 shards the JAX decoder; the "
                              f"{registry.backend_type(spec.backend).label} path runs on one device")


def table() -> list[dict[str, str]]:
    """Rows of backend x strategy with a mark per cache, for the README and the UI."""
    rows = []
    for backend in registry.backend_names():
        for strategy in registry.strategy_names():
            row = {"backend": backend, "strategy": strategy}
            for cache in registry.cache_names():
                row[cache] = "yes" if refusal(backend, strategy, cache) is None else "no"
            rows.append(row)
    return rows


def markdown_table() -> str:
    """The strategy x cache table of docs/caches.md; a test keeps that page in step with the rules above."""
    caches = registry.cache_names()
    lines = [
        "| backend | strategy | " + " | ".join(caches) + " |",
        "| --- | --- | " + " | ".join("---" for _ in caches) + " |",
    ]
    for row in table():
        if any(row[c] == "yes" for c in caches):
            lines.append(f"| {row['backend']} | {row['strategy']} | " + " | ".join(row[c] for c in caches) + " |")
    return "\n".join(lines)

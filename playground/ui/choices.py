"""What a column's strategy, cache and weights menus offer: the choices that run somewhere, each marked with a ✗
where the column's other choices refuse it (the notice says why)."""

from __future__ import annotations

from playground import compatibility, registry
from playground.spec import WEIGHTS


def offered(options: tuple[str, ...], axis: int) -> list[str]:
    """Choices that run in at least one combination; the others are not shown at all."""
    combos = [(b, s, c) for b in registry.backend_names() for s in registry.strategy_names()
              for c in registry.cache_names()]
    return [o for o in options if any(combo[axis] == o and compatibility.refusal(*combo) is None for combo in combos)]


def strategy_choices(backend: str, cache: str) -> list[tuple[str, str]]:
    """Offered strategies; those refused with the current cache/backend carry a ✗ (the notice says why): "on
    jax" where the backend runs the strategy on no cache at all, "with <cache>" where the cache is the reason."""
    def entry(name: str) -> str:
        if compatibility.refusal(backend, name, cache) is None:
            return name
        if all(compatibility.refusal(backend, name, c) is not None for c in registry.cache_names()):
            return f"{name} ✗ on {backend}"
        return f"{name} ✗ with {cache}"

    return [(entry(s), s) for s in offered(registry.strategy_names(), 1)]


def cache_choices(backend: str, strategy: str) -> list[tuple[str, str]]:
    return [(c if compatibility.refusal(backend, strategy, c) is None else f"{c} ✗ with {strategy}", c)
            for c in offered(registry.cache_names(), 2)]


def weights_choices(backend: str) -> list[tuple[str, str]]:
    """Every precision; those this backend refuses carry a ✗ (the notice says why)."""
    return [(compatibility.WEIGHT_LABELS.get(w, w) if compatibility.weights_refusal(backend, w) is None
             else f"{w} ✗ on {backend}", w) for w in WEIGHTS]

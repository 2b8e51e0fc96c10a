"""Where registered entries live, and how they are looked up (by name, in registration order)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from playground.errors import PlaygroundError
from playground.registry.entries import CacheType, Knob, Strategy

_CACHES: dict[str, CacheType] = {}
_STRATEGIES: dict[str, Strategy] = {}
_KNOBS: dict[str, Knob] = {}


def register_knob(entry: Knob) -> Knob:
    _KNOBS[entry.name] = entry
    return entry


def register_cache(entry: CacheType) -> CacheType:
    """Add a cache type (or replace one of the same name); its knobs must be known RunSpec knobs."""
    _check_knobs(entry.name, entry.knobs)
    _CACHES[entry.name] = entry
    return entry


def register_strategy(entry: Strategy) -> Strategy:
    """Add a decoding strategy (or replace one of the same name)."""
    _check_knobs(entry.name, entry.knobs)
    if entry.sampling not in ("always", "never", "optional"):
        raise ValueError(f"strategy {entry.name!r}: sampling must be 'always', 'never' or 'optional'")
    if entry.records not in ("tokens", "beams", "drafts"):
        raise ValueError(f"strategy {entry.name!r}: records must be 'tokens', 'beams' or 'drafts'")
    _STRATEGIES[entry.name] = entry
    return entry


def _check_knobs(owner: str, names: tuple[str, ...]) -> None:
    unknown = [n for n in names if n not in _KNOBS]
    if unknown:
        raise ValueError(f"{owner!r} reads unknown knob(s) {', '.join(unknown)}; known: {', '.join(_KNOBS)}")


@contextmanager
def registered(*entries: CacheType | Strategy) -> Iterator[None]:
    """Entries registered for the duration of a block, then the registry as it was (tests, experiments)."""
    saved = dict(_CACHES), dict(_STRATEGIES)
    try:
        for entry in entries:
            if isinstance(entry, CacheType):
                register_cache(entry)
            else:
                register_strategy(entry)
        yield
    finally:
        _CACHES.clear()
        _CACHES.update(saved[0])
        _STRATEGIES.clear()
        _STRATEGIES.update(saved[1])


def caches() -> tuple[CacheType, ...]:
    return tuple(_CACHES.values())


def strategies() -> tuple[Strategy, ...]:
    return tuple(_STRATEGIES.values())


def knobs() -> tuple[Knob, ...]:
    return tuple(_KNOBS.values())


def cache_names() -> tuple[str, ...]:
    return tuple(_CACHES)


def strategy_names() -> tuple[str, ...]:
    return tuple(_STRATEGIES)


def cache_type(name: str) -> CacheType:
    """The entry for `name`; RunSpec has refused unknown names before anything asks."""
    try:
        return _CACHES[name]
    except KeyError:
        raise PlaygroundError(f"cache {name!r} is not one of: {', '.join(_CACHES)}") from None


def strategy(name: str) -> Strategy:
    try:
        return _STRATEGIES[name]
    except KeyError:
        raise PlaygroundError(f"strategy {name!r} is not one of: {', '.join(_STRATEGIES)}") from None


def knob(name: str) -> Knob:
    return _KNOBS[name]

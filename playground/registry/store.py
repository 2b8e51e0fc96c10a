"""Where registered entries live, and how they are looked up (by name, in registration order)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from playground.errors import PlaygroundError
from playground.registry.entries import BackendType, CacheType, Knob, Processor, Strategy

_CACHES: dict[str, CacheType] = {}
_STRATEGIES: dict[str, Strategy] = {}
_KNOBS: dict[str, Knob] = {}
_PROCESSORS: dict[str, Processor] = {}
_BACKENDS: dict[str, BackendType] = {}
Entry = TypeVar("Entry")


def register_backend(entry: BackendType) -> BackendType:
    """Add a backend (or replace one of the same name): the CLI's `--backend`, RunSpec and the page offer it, and
    it runs what the entries name a plug-in for under its name; its knobs must be known RunSpec knobs."""
    _check_knobs(entry.name, entry.knobs)
    _BACKENDS[entry.name] = entry
    return entry


def register_knob(entry: Knob) -> Knob:
    """Add a RunSpec knob (or replace one of the same name). A knob that is not one of RunSpec's own fields
    still travels in every RunSpec, API call, CLI flag, column and sweep (RunSpec keeps it among its extras)."""
    if entry.kind not in (int, float, bool, str):
        raise ValueError(f"knob {entry.name!r}: kind must be int, float, bool or str")
    _KNOBS[entry.name] = entry
    return entry


def register_processor(entry: Processor) -> Processor:
    """Add a stage of the logits chain (or replace one of the same name), after the stages already registered
    (the default order); its knobs must be known RunSpec knobs."""
    _check_knobs(entry.name, entry.knobs)
    _PROCESSORS[entry.name] = entry
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
    _STRATEGIES[entry.name] = entry
    return entry


def _check_knobs(owner: str, names: tuple[str, ...]) -> None:
    unknown = [n for n in names if n not in _KNOBS]
    if unknown:
        raise ValueError(f"{owner!r} reads unknown knob(s) {', '.join(unknown)}; known: {', '.join(_KNOBS)}")


@contextmanager
def registered(*entries: Knob | Processor | CacheType | Strategy | BackendType) -> Iterator[None]:
    """Entries registered for the duration of a block (knobs first, in the order given), then the registry as it
    was (tests, experiments). An entry of an existing name replaces it in place (a backend's plug-in added)."""
    tables: tuple[dict, ...] = (_KNOBS, _PROCESSORS, _CACHES, _STRATEGIES, _BACKENDS)
    saved = [dict(table) for table in tables]
    try:
        for entry in entries:
            if isinstance(entry, Knob):
                register_knob(entry)
            elif isinstance(entry, Processor):
                register_processor(entry)
            elif isinstance(entry, CacheType):
                register_cache(entry)
            elif isinstance(entry, BackendType):
                register_backend(entry)
            else:
                register_strategy(entry)
        yield
    finally:
        for table, before in zip(tables, saved, strict=True):
            table.clear()
            table.update(before)


def backends() -> tuple[BackendType, ...]:
    return tuple(_BACKENDS.values())


def backend_names() -> tuple[str, ...]:
    """Every backend, in registration order (the CLI's `--backend` choices, the page's selector)."""
    return tuple(_BACKENDS)


def backend_type(name: str) -> BackendType:
    return _entry(_BACKENDS, "backend", name)


def caches() -> tuple[CacheType, ...]:
    return tuple(_CACHES.values())


def strategies() -> tuple[Strategy, ...]:
    return tuple(_STRATEGIES.values())


def knobs() -> tuple[Knob, ...]:
    return tuple(_KNOBS.values())


def processors() -> tuple[Processor, ...]:
    """Every stage of the logits chain, in the default order."""
    return tuple(_PROCESSORS.values())


def processor(name: str) -> Processor:
    try:
        return _PROCESSORS[name]
    except KeyError:
        raise PlaygroundError(f"no stage of the logits chain is named {name!r}; the stages are: "
                              f"{', '.join(_PROCESSORS)}") from None


def cache_names() -> tuple[str, ...]:
    return tuple(_CACHES)


def strategy_names() -> tuple[str, ...]:
    return tuple(_STRATEGIES)


def cache_type(name: str) -> CacheType:
    """The entry for `name`; RunSpec has refused unknown names before anything asks."""
    return _entry(_CACHES, "cache", name)


def strategy(name: str) -> Strategy:
    return _entry(_STRATEGIES, "strategy", name)


def _entry(table: Mapping[str, Entry], kind: str, name: str) -> Entry:
    """`table[name]`, or the one line naming what is allowed."""
    try:
        return table[name]
    except KeyError:
        raise PlaygroundError(f"{kind} {name!r} is not one of: {', '.join(table)}") from None


def knob(name: str) -> Knob:
    return _KNOBS[name]


def has_knob(name: str) -> bool:
    return name in _KNOBS


def has_processor(name: str) -> bool:
    return name in _PROCESSORS

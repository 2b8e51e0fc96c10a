"""The capability registry: every KV-cache type and decoding strategy the playground offers, as entries.

Validation (RunSpec), the compatibility table, the page's choices and knobs, the cache strip, the benchmarks
and both backends read the entries from here; none of them names a cache or a strategy. A new cache is one
`register_cache(CacheType(...))` call (docs/architecture.md walks through one).
"""

from playground.registry import builtin  # noqa: F401  (registers the built-in entries)
from playground.registry.entries import BackendType, CacheNeed, CacheType, Knob, Processor, Range, Strategy, lazy
from playground.registry.records import RecordField, RunRecords, TokenRecords
from playground.registry.store import (
    backend_names,
    backend_type,
    backends,
    cache_names,
    cache_type,
    caches,
    has_knob,
    has_processor,
    knob,
    knobs,
    processor,
    processors,
    register_backend,
    register_cache,
    register_knob,
    register_processor,
    register_strategy,
    registered,
    strategies,
    strategy,
    strategy_names,
)

__all__ = ["BackendType", "CacheNeed", "CacheType", "Knob", "Processor", "Range", "RecordField", "RunRecords",
           "Strategy", "TokenRecords", "backend_names", "backend_type", "backends", "cache_names", "cache_type",
           "caches", "has_knob", "has_processor", "knob", "knobs", "lazy", "processor", "processors",
           "register_backend", "register_cache", "register_knob", "register_processor", "register_strategy",
           "registered", "strategies", "strategy", "strategy_names"]

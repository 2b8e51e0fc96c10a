"""Which strategy works with which cache on which backend, and why the others are refused up front.

Derived from the registry: a strategy that verifies drafts needs a cache that rolls rejected ones back on that
backend (`CacheType.no_rollback`). Model-dependent refusals (sink on a model with sliding layers) belong to
the cache entries and are checked once the model's config is known.
"""

from __future__ import annotations

from typing import Protocol

from playground import registry
from playground.errors import PlaygroundError
from playground.registry import BACKENDS

WEIGHTS = ("fp32", "bf16", "int8", "nf4")
# Weights the JAX path refuses, and the measured reason (python -m playground.tools.bench_matmul on SmolLM2's output
# head, and a bf16 decoder built as the int8 one is, on a 2-core AMD EPYC; docs/benchmarks.md). It runs fp32, and
# int8 converted inside the product (int8.py).
JAX_REFUSED_WEIGHTS = {
    "bf16": "bf16 weights are not offered on the JAX path: they measured slower than fp32 in the decode loop "
            "(24.8 tok/s against 45.9 on SmolLM2; XLA on CPU hoists an inline conversion out of the loop, and "
            "converting a block of rows at a time took 35 ms per output-head product against fp32's 2.9 ms), "
            "while int8 ran at 125 tok/s; use int8 or fp32",
    "nf4": "4-bit weights are not offered on the JAX path: XLA on CPU does not fuse unpacking two weights per byte "
           "into the product, so they measured slower than fp32 (int4 in groups of 64: 7.0 ms per output-head "
           "product, inline or a block of rows at a time, against fp32's 2.9 ms and int8's 0.9 ms); use int8 or "
           "fp32",
}


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
    others = [b for b in BACKENDS if b != backend and b not in registry.cache_type(cache).no_rollback]
    advice = "use cache " + " or ".join(f"'{c}'" for c in caches)
    return advice + "".join(f", or backend '{b}'" for b in others)


def refusal(backend: str, strategy: str, cache: str) -> str | None:
    """The reason a combination cannot run, or None when it can."""
    if not registry.strategy(strategy).drafts:
        return None
    why = registry.cache_type(cache).no_rollback.get(backend)
    return None if why is None else f"{why}; {_instead(backend, cache)}"


def weights_refusal(backend: str, weights: str) -> str | None:
    """Why `weights` cannot run on `backend`, or None when they can."""
    return JAX_REFUSED_WEIGHTS.get(weights) if backend == "jax" else None


def check_combination(spec: Combination) -> None:
    """Raise the PlaygroundError users see for a combination that cannot run, naming what to pick instead."""
    reason = refusal(spec.backend, spec.strategy, spec.cache)
    if reason is not None:
        raise PlaygroundError(
            f"backend={spec.backend} strategy={spec.strategy} cache={spec.cache} cannot run: {reason}"
        )
    why = weights_refusal(spec.backend, spec.weights)
    if why is not None:
        raise PlaygroundError(f"backend={spec.backend} weights={spec.weights} cannot run: {why}, or backend 'torch'")
    if spec.backend == "torch" and spec.devices != 1:
        raise PlaygroundError("devices > 1 shards the JAX decoder; the PyTorch path runs on one device")


def table() -> list[dict[str, str]]:
    """Rows of backend x strategy with a mark per cache, for the README and the UI."""
    rows = []
    for backend in BACKENDS:
        for strategy in registry.strategy_names():
            row = {"backend": backend, "strategy": strategy}
            for cache in registry.cache_names():
                row[cache] = "yes" if refusal(backend, strategy, cache) is None else "no"
            rows.append(row)
    return rows


def markdown_table() -> str:
    """The README's table; a test keeps the README in step with the rules above."""
    caches = registry.cache_names()
    lines = [
        "| backend | strategy | " + " | ".join(caches) + " |",
        "| --- | --- | " + " | ".join("---" for _ in caches) + " |",
    ]
    for row in table():
        if any(row[c] == "yes" for c in caches):
            lines.append(f"| {row['backend']} | {row['strategy']} | " + " | ".join(row[c] for c in caches) + " |")
    return "\n".join(lines)


def draft_vocabulary_refusal(assistant: str, draft_vocab: int, main_vocab: int) -> str:
    """Why the JAX path refuses a draft model of another vocabulary (universal assisted decoding)."""
    return (f"assistant {assistant!r} has a vocabulary of {draft_vocab} tokens against the main model's "
            f"{main_vocab}: the JAX path verifies drafts of the same vocabulary only (token ids passed as they "
            "are; universal assisted decoding re-tokenizes text between the two and cannot be made exact "
            "here); use backend 'torch' for this pair, or prompt_lookup on JAX")


def check_draft_vocabulary(assistant: str, main_config: dict | None, draft_config: dict | None) -> None:
    """Refuse a JAX draft of another vocabulary from the configs on disk, before either model loads."""
    sizes = [((c or {}).get("text_config") or c or {}).get("vocab_size") for c in (main_config, draft_config)]
    main, draft = sizes
    if isinstance(main, int) and isinstance(draft, int) and main != draft:
        raise PlaygroundError(draft_vocabulary_refusal(assistant, draft, main))

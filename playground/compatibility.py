"""Which strategy works with which cache on which backend, and why the others are refused up front."""

from __future__ import annotations

from typing import Protocol

from playground.errors import PlaygroundError

# The axes of a run; RunSpec validates against them, the page offers them, the README's table is drawn from them.
STRATEGIES = ("greedy", "sampling", "beam", "assisted")
CACHES = ("dynamic", "static", "quantized", "sliding", "sink")
BACKENDS = ("torch", "jax")
WEIGHTS = ("fp32", "bf16", "int8", "nf4")


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

# (backend, strategy, cache) -> reason it cannot run; anything absent is supported.
# Reasons say why and what to pick instead, since they are shown to users verbatim.
_REFUSED: dict[tuple[str, str, str], str] = {}
for _cache, _why in (
    (
        "static",
        "transformers' assisted generation rolls rejected drafts back with crop(), which a static cache cannot do",
    ),
    ("quantized", "rejected drafts would have to be removed from already-quantized blocks (no crop())"),
    ("sink", "rejected drafts cannot be rolled back once the sink cache has evicted and re-rotated keys"),
):
    _REFUSED[("torch", "assisted", _cache)] = f"{_why}; use cache 'dynamic' with strategy 'assisted'"
# JAX assisted decoding rolls rejected drafts back by moving the cache position, exact only where every position
# stays in full precision until overwritten (caches/extend.py)
for _cache, _why in (
    ("quantized", "a verify pass would quantize rejected drafts into the store, which a rollback cannot undo"),
    ("sliding", "a verify pass writes past the window, overwriting positions a rejected draft would need back"),
    ("sink", "a verify pass writes past the window, overwriting positions a rejected draft would need back"),
):
    _REFUSED[("jax", "assisted", _cache)] = f"{_why}; use cache 'dynamic' or 'static', or backend 'torch'"


def refusal(backend: str, strategy: str, cache: str) -> str | None:
    """The reason a combination cannot run, or None when it can."""
    return _REFUSED.get((backend, strategy, cache))


def check_combination(spec: Combination) -> None:
    """Raise the PlaygroundError users see for a combination that cannot run, naming what to pick instead."""
    reason = refusal(spec.backend, spec.strategy, spec.cache)
    if reason is not None:
        raise PlaygroundError(
            f"backend={spec.backend} strategy={spec.strategy} cache={spec.cache} cannot run: {reason}"
        )
    if spec.backend == "jax" and spec.weights != "fp32":
        raise PlaygroundError(
            f"weights '{spec.weights}' are not supported on the JAX path (bitsandbytes layers only run in "
            "PyTorch, and XLA on CPU converts bf16 instead of fusing it); use fp32 or backend 'torch'"
        )
    if spec.backend == "torch" and spec.devices != 1:
        raise PlaygroundError("devices > 1 shards the JAX decoder; the PyTorch path runs on one device")


def table() -> list[dict[str, str]]:
    """Rows of backend x strategy with a mark per cache, for the README and the UI."""
    rows = []
    for backend in BACKENDS:
        for strategy in STRATEGIES:
            row = {"backend": backend, "strategy": strategy}
            for cache in CACHES:
                row[cache] = "yes" if refusal(backend, strategy, cache) is None else "no"
            rows.append(row)
    return rows


def markdown_table() -> str:
    """The README's table; a test keeps the README in step with the rules above."""
    lines = [
        "| backend | strategy | " + " | ".join(CACHES) + " |",
        "| --- | --- | " + " | ".join("---" for _ in CACHES) + " |",
    ]
    for row in table():
        if any(row[c] == "yes" for c in CACHES):
            lines.append(f"| {row['backend']} | {row['strategy']} | " + " | ".join(row[c] for c in CACHES) + " |")
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

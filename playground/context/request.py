"""What the context command is asked for, and what is refused before anything loads: the measures, the context
lengths and token counts, checked against the model's context from its config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from playground import registry
from playground.errors import PlaygroundError

MEASURES = ("speed", "quality")
DECODE_TOKENS = 64  # new tokens timed at every context length
DEFAULT_LENGTHS = "512,1024,2048"
DEFAULT_TOKENS = 2048
DEFAULT_BUCKETS = 8
# the RunSpec keys the command takes besides every cache's own knobs (the rest of a run's keys mean nothing here)
SPEC_KEYS = ("model", "backend", "cache", "weights", "devices")


class MeasureStopped(Exception):  # noqa: N818 - a stop asked for, not a failure
    """A measurement ended early because its caller asked it to stop (the page's Stop button)."""


def never() -> bool:
    """A `should_stop` that never stops (the command runs to the end)."""
    return False


def spec_keys() -> tuple[str, ...]:
    """The RunSpec keys the command reads: which model, backend and cache, and every registered cache's knobs."""
    knobs = (name for cache in registry.caches() for name in cache.knobs)
    return tuple(dict.fromkeys((*SPEC_KEYS, *knobs)))


@dataclass(frozen=True)
class ContextRequest:
    """What to measure: `lengths` (speed: tokens of context) and `tokens` (quality: tokens teacher-forced)."""

    measures: tuple[str, ...]
    lengths: tuple[int, ...]
    tokens: int
    buckets: int

    def longest(self) -> int:
        """The most tokens of text any measurement reads."""
        return max([*(self.lengths if "speed" in self.measures else ()),
                    *((self.tokens,) if "quality" in self.measures else ())])


def parse_measures(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not names or any(name not in MEASURES for name in names):
        raise PlaygroundError(f"--measure {text!r}: give {' and/or '.join(MEASURES)}, comma-separated")
    return names


def parse_lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        lengths = ()
    if not lengths or min(lengths) < 1:
        raise PlaygroundError(f"--lengths {text!r}: give context lengths in tokens, whole numbers above 0 separated "
                              "by commas (e.g. 512,1024,2048)")
    return lengths


def parse_request(measures: str, lengths: str, tokens: int, buckets: int) -> ContextRequest:
    """The request from the command's options (or the page's fields, in the same words)."""
    request = ContextRequest(parse_measures(measures), parse_lengths(lengths), tokens, buckets)
    if "quality" in request.measures and request.tokens < 2:
        raise PlaygroundError(f"--tokens {request.tokens}: quality needs at least 2 tokens (one position to score)")
    if request.buckets < 1:
        raise PlaygroundError(f"--buckets {request.buckets}: give at least 1")
    return request


def model_context(config: Mapping[str, Any] | None) -> int | None:
    """The model's context in tokens from its config (a multimodal config nests the text model's)."""
    text = (config or {}).get("text_config") or config or {}
    limit = text.get("max_position_embeddings")
    return limit if isinstance(limit, int) else None


def check_context(request: ContextRequest, model: str, context: int | None) -> None:
    """Refuse lengths the model cannot attend over, naming its context."""
    if context is None:
        return
    over = [length for length in request.lengths if length + DECODE_TOKENS > context]
    if "speed" in request.measures and over:
        raise PlaygroundError(
            f"--lengths {','.join(map(str, over))}: a length and the {DECODE_TOKENS} tokens decoded after it must "
            f"fit {model}'s context of {context} tokens; the longest length allowed is {context - DECODE_TOKENS}")
    if "quality" in request.measures and request.tokens > context:
        raise PlaygroundError(f"--tokens {request.tokens} exceeds {model}'s context of {context} tokens")

"""What flows out of a run: progress, text as it is generated, and the final Result; plus what a backend returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Backends call this with each chunk of new token ids (first sequence) as soon as they exist.
EmitTokens = Callable[[list[int]], None]
# Backends poll this between steps/chunks; True means the user pressed stop or the request ran out of time.
ShouldStop = Callable[[], bool]


@dataclass(frozen=True)
class ProgressEvent:
    """Model loading, conversion or compilation under way."""

    fraction: float
    message: str


@dataclass(frozen=True)
class TextEvent:
    """Newly decoded text; `text` is the whole continuation so far, `delta` the part added now."""

    delta: str
    text: str
    new_tokens: int


@dataclass(frozen=True)
class DoneEvent:
    result: dict[str, Any]  # the Result JSON (see DESIGN.md)


@dataclass
class GenerationOutput:
    """What a backend measured; the runner turns it into the Result JSON.

    All times are time.perf_counter() values, so the runner can relate them to its own clock.
    """

    sequences: list[list[int]]  # new token ids per returned sequence, best first
    start_time: float  # when the backend began work on the prompt (after the model was loaded)
    token_times: list[float]  # when each new token of sequences[0] became available on the host
    kv_cache_bytes: int  # bytes held by the cache's tensors at the end of the run
    compile_s: float = 0.0  # time spent compiling before the first token (JAX path; 0 when nothing compiled)
    scores: list[float] | None = None  # beam search: sequence scores, same order as sequences
    acceptance_rate: float | None = None  # assisted: accepted draft tokens / proposed draft tokens
    forward_passes: int | None = None  # main-model forward passes, measured
    stopped: bool = False  # ended early by should_stop()
    # per token of sequences[0]: {"p": prob of the chosen token, "entropy": nats, "top": [(id, p), ...]}
    token_info: list[dict[str, Any]] | None = None
    draft_flags: list[bool] | None = None  # assisted: True where the token was an accepted draft token
    kv_trace: list[int] = field(default_factory=list)  # cache bytes after each decoding step
    extra: dict[str, Any] = field(default_factory=dict)  # backend-specific figures shown as is

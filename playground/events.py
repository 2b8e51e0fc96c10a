"""What flows out of a run, in order: progress while loading or compiling, text as it is generated, the Result."""

from __future__ import annotations

from dataclasses import dataclass

from playground.result import Result


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
    result: Result  # the Result JSON (see DESIGN.md)


Event = ProgressEvent | TextEvent | DoneEvent

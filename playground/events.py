"""What flows out of a run, in order: progress while loading or compiling, text as it is generated (or beam
search's leading beam while it searches), the Result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playground.result import Result


@dataclass(frozen=True)
class ProgressEvent:
    """Model loading, conversion or compilation under way; repeated while a long stage runs, with its age."""

    fraction: float
    message: str
    elapsed_s: float = 0.0  # seconds since this stage began (0 when it is first reported)


@dataclass(frozen=True)
class TextEvent:
    """Newly decoded text; `text` is the whole continuation so far, `delta` the part added now."""

    delta: str
    text: str
    new_tokens: int


@dataclass(frozen=True)
class HypothesisEvent:
    """Beam search's leading running beam so far, whole: it may still change (or lose to a finished beam), so
    it replaces the last one rather than adding to it; the returned text arrives with DoneEvent."""

    text: str
    new_tokens: int


@dataclass(frozen=True)
class DoneEvent:
    result: Result  # the Result JSON (see docs/api.md)


Event = ProgressEvent | TextEvent | HypothesisEvent | DoneEvent


class IncrementalText:
    """Decodes the growing token list so the streamed deltas add up exactly to the final text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""

    def add(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        decoded = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if decoded.endswith("\ufffd"):
            return ""  # half of a multi-byte character: wait for the rest
        return self._advance(decoded)

    def finish(self) -> str:
        return self._advance(self.tokenizer.decode(self.ids, skip_special_tokens=True))

    def _advance(self, decoded: str) -> str:
        delta = decoded[len(self.text):] if decoded.startswith(self.text) else decoded
        self.text = decoded if decoded.startswith(self.text) else self.text + decoded
        return delta

"""Stop strings over a growing text: where the text ends (the first stop cuts it) and how much of it may be
streamed already (never a beginning that a stop string could still complete)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StopScan:
    cut: int | None  # where the first stop string begins; None: none has appeared
    safe: int  # characters that can be sent now: up to the cut, else before any partial stop at the end


def scan(text: str, stops: tuple[str, ...]) -> StopScan:
    found = [i for i in (text.find(stop) for stop in stops) if i >= 0]
    if found:
        return StopScan(min(found), min(found))
    held = max((k for stop in stops for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0)
    return StopScan(None, len(text) - held)

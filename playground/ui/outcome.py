"""The results State of a page: per column slot its Result (or None) and label, and the settings that ran."""

from __future__ import annotations

from typing import Any, TypedDict

from playground.result import Result
from playground.ui.columns import MAX_COLUMNS, label


class Outcome(TypedDict):
    settings: dict[str, Any] | None  # the page settings of the run (see ui.export.page_settings)
    results: list[Result | None]  # by column slot
    labels: list[str | None]  # by column slot; None for a slot that was not part of the run


def empty_outcome(settings: dict[str, Any] | None = None, active: list[int] | None = None) -> Outcome:
    """No results yet; the labels of the columns in `active` (slot indices, in the order of settings' columns)."""
    labels: list[str | None] = [None] * MAX_COLUMNS
    for i, column in zip(active or [], (settings or {}).get("columns", []), strict=False):
        labels[i] = label(i, column)
    return {"settings": settings, "results": [None] * MAX_COLUMNS, "labels": labels}


def finished(outcome: Outcome) -> tuple[list[Result], list[str]]:
    """The finished results and their labels, in column order."""
    pairs = [(r, name) for r, name in zip(outcome["results"], outcome["labels"], strict=True)
             if r is not None and name is not None]
    return [r for r, _ in pairs], [name for _, name in pairs]

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
    for position, (i, column) in enumerate(zip(active or [], (settings or {}).get("columns", []), strict=False)):
        labels[i] = label(position, column)
    return {"settings": settings, "results": [None] * MAX_COLUMNS, "labels": labels}


def without(outcome: Outcome, slot: int) -> Outcome:
    """The outcome once a column is removed: its result leaves the table, the plots and the divergence note,
    and the columns after it are renumbered as their cards are."""
    results, labels = list(outcome["results"]), list(outcome["labels"])
    results[slot], labels[slot] = None, None
    named = [i for i, name in enumerate(labels) if name is not None]
    for position, i in enumerate(named, start=1):
        labels[i] = f"{position}:{str(labels[i]).split(':', 1)[1]}"
    return {"settings": outcome["settings"], "results": results, "labels": labels}


def finished(outcome: Outcome) -> tuple[list[Result], list[str]]:
    """The finished results and their labels, in column order."""
    pairs = [(r, name) for r, name in zip(outcome["results"], outcome["labels"], strict=True)
             if r is not None and name is not None]
    return [r for r, _ in pairs], [name for _, name in pairs]

"""The results State of a page: per column slot its Result (or None), label and position, and the settings that ran.

A column's number on the page is its position among the visible columns, not its slot: removing column 2 of 3
renumbers the third as 2, and its label, plot series and colour follow (ui.plots), as its card does."""

from __future__ import annotations

from typing import TypedDict

from playground.result import Result
from playground.ui.columns import MAX_COLUMNS
from playground.ui.labels import column_labels
from playground.ui.settings import PageSettings


class Outcome(TypedDict):
    settings: PageSettings | None  # the page settings of the run
    results: list[Result | None]  # by column slot
    labels: list[str | None]  # by column slot; None for a slot that was not part of the run
    positions: list[int | None]  # by column slot: its 0-based position among the visible columns; None if hidden


def empty_outcome(settings: PageSettings | None = None, active: list[int] | None = None) -> Outcome:
    """No results yet; the labels of the columns in `active` (slot indices, in the order of settings' columns):
    each names what sets its column apart from the others (ui.labels)."""
    labels: list[str | None] = [None] * MAX_COLUMNS
    positions: list[int | None] = [None] * MAX_COLUMNS
    columns = settings["columns"] if settings else []
    names = column_labels(columns)
    for position, (i, name) in enumerate(zip(active or [], names, strict=False)):
        labels[i], positions[i] = name, position
    return {"settings": settings, "results": [None] * MAX_COLUMNS, "labels": labels, "positions": positions}


def renumbered(outcome: Outcome, visible: list[bool]) -> Outcome:
    """The outcome once the visible columns change: a hidden column's result leaves the table, the plots and the
    divergence note, and the others take their new positions (numbers in labels, plot series and colours)."""
    results, labels = list(outcome["results"]), list(outcome["labels"])
    positions: list[int | None] = [None] * MAX_COLUMNS
    position = 0
    for i, shown in enumerate(visible):
        if not shown:
            results[i], labels[i] = None, None
            continue
        positions[i] = position
        if labels[i] is not None:
            labels[i] = f"{position + 1}:{str(labels[i]).split(':', 1)[1]}"
        position += 1
    return {"settings": outcome["settings"], "results": results, "labels": labels, "positions": positions}


def finished(outcome: Outcome) -> tuple[list[Result], list[str]]:
    """The finished results and their labels, in column order."""
    pairs = [(r, name) for r, name in zip(outcome["results"], outcome["labels"], strict=True)
             if r is not None and name is not None]
    return [r for r, _ in pairs], [name for _, name in pairs]

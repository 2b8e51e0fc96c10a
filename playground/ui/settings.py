"""The page's settings as types: one column's (as shared and as its controls hold them) and the whole page's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

# TypedDicts rather than dataclasses: settings travel as JSON (the settings box, the link token, the results
# export) and through gr.State, and these are exactly the dicts those formats already hold.

SETTINGS_VERSION = 1


# The RunSpec keys one column owns (columns.column_keys(): the registry's knobs decide), as a link or the settings
# JSON carries them: only the keys that apply to the column's choice, so any may be absent (RunSpec's default then).
# A plain dict: the keys are the registry's, so a knob registered later travels without another list to edit.
ColumnSettings = dict[str, Any]
# What a column's controls hold: a value for every key of its ColumnSettings, and the UI-only ones (which source of
# draft tokens the assisted knobs show). Never shared: columns.column_settings turns it into ColumnSettings.
ColumnValues = dict[str, Any]


class PageSettings(TypedDict):
    """What every column shares (prompt, seed, prompt format, timed repeats) and each visible column's own
    settings, in page order: the settings JSON, and (defaults dropped, deflated) the link's ?s= token."""

    version: int
    prompt: str
    seed: int
    mode: str  # a key of chat.MODES
    repeats: int
    columns: list[ColumnSettings]


def page_settings(prompt: str, seed: int | float | None, mode: str, columns: Sequence[ColumnSettings],
                  repeats: int | float | None = 1) -> PageSettings:
    """The page's settings from its values (a number box may hand back a float or nothing)."""
    return {"version": SETTINGS_VERSION, "prompt": prompt, "seed": int(seed or 0), "mode": mode,
            "repeats": int(repeats or 1), "columns": [ColumnSettings(**c) for c in columns]}

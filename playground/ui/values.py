"""What the page's controls hold when an event fires, typed, and the page settings they amount to."""

from __future__ import annotations

from dataclasses import dataclass

from playground.ui.columns import column_settings
from playground.ui.settings import ColumnValues, PageSettings, page_settings


@dataclass(frozen=True)
class PageValues:
    """The values Gradio hands a handler keyed by component (Page.read turns them into this), so handlers read
    names rather than components; frozen, as a run must keep the settings it started with."""

    prompt: str
    seed: int | float | None  # a number box hands back a float, or nothing while it is empty
    repeats: int | float | None
    mode: str  # a key of chat.MODES
    colour_by: str  # a key of tokens.COLOUR_MODES
    visible: tuple[bool, ...]  # by column slot
    columns: tuple[ColumnValues, ...]  # by column slot, shown or not

    @property
    def active(self) -> list[int]:
        """The visible columns' slots, in page order."""
        return [i for i, shown in enumerate(self.visible) if shown]

    def settings(self) -> PageSettings:
        """The page settings of the visible columns, in page order (hidden knobs left out of each)."""
        return page_settings(self.prompt, self.seed, self.mode, [column_settings(self.columns[i]) for i in self.active],
                             self.repeats)

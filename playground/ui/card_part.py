"""A strategy's own part of the column card, beyond the widgets its knobs' records draw: a control that chooses
between knobs, or holds a knob under a meaning of the strategy's own, a note that pairs a knob with another, and
how those controls' values become RunSpec keys and back.

The strategy's view names its part (`StrategyView.card`); the card, its visibility and the settings it sends ask
every registered view's part, so they name no strategy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class CardPart:
    """Adds nothing: the part of a strategy whose knobs' records draw all it needs."""

    group: str = ""  # the knob group (`<group>_knobs`, from the knobs' records) its widgets go in; "": its own
    own_groups: Mapping[str, tuple[str, ...]] = {}  # blocks of its own -> the RunSpec keys whose use shows them
    defaults: Mapping[str, Any] = {}  # what its controls show while unused (keys of the page's own included)
    notes: Mapping[str, str] = {}  # a line after a knob's help (the knob it is best paired with)
    structural: tuple[str, ...] = ()  # its controls whose change redraws the card
    writes: tuple[str, ...] = ()  # RunSpec keys that `to_settings` alone sends (the card leaves them out)

    def draw(self, index: int, knobs: dict[str, Any], groups: dict[str, Any], values: Mapping[str, Any],
             shown: Mapping[str, bool]) -> None:
        """Its widgets (into `knobs`) and blocks (into `groups`), inside `group` when it names one."""

    def shown(self, values: Mapping[str, Any]) -> dict[str, bool]:
        """Which of its blocks show, from its controls' values (`own_groups` show by the keys the choice reads)."""
        return {}

    def to_settings(self, values: Mapping[str, Any], settings: dict[str, Any]) -> None:
        """Its controls' values -> the RunSpec keys they set, in the column's settings (where the choice reads
        them)."""

    def to_values(self, settings: Mapping[str, Any], values: dict[str, Any], defaults: Mapping[str, Any]) -> None:
        """Saved settings -> its controls' values (the inverse of `to_settings`)."""


NO_CARD = CardPart()

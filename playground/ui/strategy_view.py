"""How the page draws a strategy's own records: the view its registry entry names (`Strategy.view`).

The token view, the sampling cut, the column's view box, the comparison under the columns and the legend ask
the column's strategy's view and name no strategy themselves. Every method has a neutral default, so a view
overrides only what its strategy records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from playground import registry
from playground.result import Result, TokenRecord
from playground.retention import VerifyPass
from playground.ui.card_part import NO_CARD, CardPart


class StrategyView:
    """Draws nothing: the view of a strategy that records nothing of its own (greedy, sampling)."""

    # spans the token view's legend shows for this view's marks (the legend lists every registered view's)
    legend: tuple[str, ...] = ()
    css: str = ""  # the page's CSS for what it draws (the page adds every registered view's when it launches)
    card: CardPart = NO_CARD  # its own controls on the column card, beside its knobs' widgets

    def above_tokens(self, result: Result) -> str:
        """HTML above the column's tokens (assisted decoding's strip of verification steps)."""
        return ""

    def before_tokens(self, result: Result, shown: Callable[[str], str]) -> dict[int, str]:
        """Token index -> HTML placed before that token (assisted decoding's rejected drafts); `shown` formats a
        text as the token view shows text."""
        return {}

    def token_classes(self, token: TokenRecord) -> list[str]:
        """Classes marking a token (contrastive search: a candidate other than the most likely one won)."""
        return []

    def tooltip_lines(self, token: TokenRecord) -> list[str]:
        """Lines of the token's tooltip on what the strategy weighed for it."""
        return []

    def below_tokens(self, tokens: Sequence[TokenRecord]) -> str:
        """HTML under the column's tokens: a summary of the run's records."""
        return ""

    def panel_html(self, record: TokenRecord, spec: Mapping[str, Any]) -> str:
        """The clicked token's table of what the strategy weighed, in the sampling cut's panel."""
        return ""

    def stage_labels(self, record: TokenRecord) -> dict[str, str]:
        """Names of the strategy's own stages ahead of the logits chain in this token's record (DoLa's contrast)."""
        return {}

    def verify_passes(self, result: Result) -> list[VerifyPass]:
        """Forward passes that each wrote several positions (assisted decoding's verify passes), which the cache
        strip steps through; []: one position per step."""
        return []

    def notice_parts(self, result: Result) -> list[str]:
        """Short phrases for the column's one-line summary after its speed (assisted decoding's share of drafts
        accepted)."""
        return []

    def box_html(self, result: Result) -> str:
        """The column's own box under its tokens (`VIEW_BOX_ID-<slot>`; a search's tree of hypotheses): '' hides
        the box."""
        return ""

    def across_columns(self, results: Sequence[Result | None], labels: Sequence[str]) -> str:
        """Markdown under the columns comparing the columns this view draws (finished hypotheses ranked across
        beam columns); '' with nothing to compare. Each kind of view is asked once, with every column."""
        return ""

    def step_lines(self, record: TokenRecord) -> str:
        """Step mode: HTML under a token's candidates, what the strategy weighed for it beside the chain."""
        return ""

    def step_summary(self, result: Result) -> str:
        """Step mode: HTML under the candidates about the step's run as a whole (assisted decoding's drafts)."""
        return ""


NO_VIEW = StrategyView()
# the id prefix of a column's view box: scripts and browser tests know it by the beam tree, the first view to draw one
VIEW_BOX_ID = "beam-tree"


def view_of(strategy: str | None) -> StrategyView:
    """The view the strategy's entry names; the neutral one for a strategy without one, or no longer registered
    (a saved result of a strategy an experiment registered)."""
    if strategy not in registry.strategy_names():
        return NO_VIEW
    factory = registry.strategy(str(strategy)).view
    return factory() if factory is not None else NO_VIEW


def result_view(result: Result | None) -> StrategyView:
    """The view of the strategy a result ran."""
    return view_of(result["spec"].get("strategy")) if result else NO_VIEW


def legend_spans() -> list[str]:
    """Every registered view's legend spans, once each, in registration order."""
    views = [view_of(s.name) for s in registry.strategies() if s.view is not None]
    return list(dict.fromkeys(span for view in views for span in view.legend))


def views_css() -> str:
    """Every registered view's CSS, once each."""
    views = [view_of(s.name) for s in registry.strategies() if s.view is not None]
    return "".join(dict.fromkeys(view.css for view in views))


def across_columns(results: Sequence[Result | None], labels: Sequence[str]) -> str:
    """Every kind of view's comparison of the columns, once each, in column order."""
    views = {type(view): view for view in map(result_view, results)}
    return "".join(view.across_columns(results, labels) for view in views.values())


def card_parts() -> list[CardPart]:
    """Every registered view's part of the column card, once each, in registration order."""
    views = [view_of(s.name) for s in registry.strategies() if s.view is not None]
    return list({id(view.card): view.card for view in views if view.card is not NO_CARD}.values())

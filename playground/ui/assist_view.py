"""Assisted decoding you can see: per verification step, what the draft proposed and how much the main model kept.

The token view shows a step's rejected drafted tokens struck through, just before the main model's own token
that replaced them; the strip above it draws one bar per step, its height the drafted tokens and its filled
part the accepted ones.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from playground.result import Result, TokenRecord
from playground.retention import VerifyPass
from playground.strategy_records.assisted import AssistRecord
from playground.ui.draft_card import DRAFT_SOURCE
from playground.ui.strategy_view import StrategyView

STRIP_HEIGHT = 36  # px of the tallest bar
MAX_BARS = 160  # longer runs are cut here, with a note, to keep the page light

ASSIST_CSS = """
.tok.draft { border-bottom: 3px solid #2563eb; }
.dark .tok.draft { border-bottom-color: #60a5fa; }
.tok.rejected { text-decoration: line-through; text-decoration-color: #dc2626; text-decoration-thickness: 2px;
                background: transparent; color: #6b7280; }
.dark .tok.rejected { color: #9ca3af; }
.assist-strip { display: flex; align-items: flex-end; gap: 1px; height: 36px; padding: 2px 0; overflow-x: auto; }
.assist-bar { flex: 0 0 6px; display: flex; flex-direction: column-reverse; background: #fca5a5; min-height: 2px; }
.assist-bar .acc { background: #2563eb; }
.assist-bar.none { background: var(--border-color-primary); }
.assist-note { font-size: 0.82em; color: var(--body-text-color-subdued); }
"""


def verify_passes(steps: Sequence[AssistRecord] | None) -> list[VerifyPass]:
    """Each verification step as a pass, with the new tokens before it: a step adds its accepted drafts and
    then one token of the main model."""
    passes, before = [], 0
    for step in steps or []:
        passes.append(VerifyPass(before, len(step["drafted"]), step["accepted"]))
        before += step["accepted"] + 1
    return passes


def rejected_at(steps: Sequence[AssistRecord] | None) -> dict[int, list[str]]:
    """Token index of each step's own (main-model) token -> the texts of the drafted tokens it replaced.

    The step's own token sits at (tokens before the step) + accepted; the drafted tokens from `accepted` on
    were rejected there.
    """
    found: dict[int, list[str]] = {}
    for step, verify in zip(steps or [], verify_passes(steps), strict=True):
        rejected = step["drafted_text"][step["accepted"]:]
        if rejected:
            found[verify.before + verify.accepted] = list(rejected)
    return found


def rejected_span(texts: Sequence[str], shown: str) -> str:
    """One struck-through span for a step's rejected drafts; `shown` is their text as the token view shows
    text (the caller formats it, so whitespace looks the same as in accepted tokens)."""
    title = html.escape("rejected draft: " + " ".join(repr(t) for t in texts), quote=True)
    return f"<span class='tok rejected' title=\"{title}\">{shown}</span>"


def assist_strip_html(steps: Sequence[AssistRecord] | None) -> str:
    """One bar per verification step: height = drafted tokens, blue = accepted, red = rejected."""
    if not steps:
        return ""
    tallest = max((len(s["drafted"]) for s in steps), default=0) or 1
    bars = []
    for index, step in enumerate(steps[:MAX_BARS]):
        drafted, accepted = len(step["drafted"]), step["accepted"]
        title = html.escape(f"step {index + 1}: drafted {drafted}, accepted {accepted}", quote=True)
        if not drafted:
            bars.append(f"<div class='assist-bar none' title=\"{title}\"></div>")
            continue
        height = max(2, round(STRIP_HEIGHT * drafted / tallest))
        filled = round(height * accepted / drafted)
        bars.append(f"<div class='assist-bar' style='height:{height}px' title=\"{title}\">"
                    f"<div class='acc' style='height:{filled}px'></div></div>")
    drafted_total = sum(len(s["drafted"]) for s in steps)
    accepted_total = sum(s["accepted"] for s in steps)
    cut = f" (first {MAX_BARS} shown)" if len(steps) > MAX_BARS else ""
    note = (f"{len(steps)} verification steps{cut}: {accepted_total} of {drafted_total} drafted tokens accepted "
            "(blue accepted, red rejected; struck-through tokens below are the rejected drafts)")
    return (f"<div class='assist-view'><div class='assist-strip'>{''.join(bars)}</div>"
            f"<div class='assist-note'>{note}</div></div>")


class AssistedView(StrategyView):
    """Assisted decoding's records on the page: the strip of verification steps above the tokens, each step's
    rejected drafts struck through before the token that replaced them, and accepted drafts underlined."""

    legend = ("<span class='tok draft'>accepted draft</span>", "<span class='tok rejected'>rejected draft</span>")
    css = ASSIST_CSS
    card = DRAFT_SOURCE

    def notice_parts(self, result: Result) -> list[str]:
        rate = result["metrics"]["acceptance_rate"]
        return [] if rate is None else [f"{100 * rate:.0f}% drafts accepted"]

    def above_tokens(self, result: Result) -> str:
        return assist_strip_html(result.get("assisted_steps"))

    def before_tokens(self, result: Result, shown: Callable[[str], str]) -> dict[int, str]:
        return {index: rejected_span(texts, shown("".join(texts)))
                for index, texts in rejected_at(result.get("assisted_steps")).items()}

    def verify_passes(self, result: Result) -> list[VerifyPass]:
        return verify_passes(result.get("assisted_steps"))

    def token_classes(self, token: TokenRecord) -> list[str]:
        return ["draft"] if token.get("draft") is True else []

    def tooltip_lines(self, token: TokenRecord) -> list[str]:
        draft = token.get("draft")
        return ["accepted draft token"] if draft is True else ["main-model token"] if draft is False else []

    def step_summary(self, result: Result) -> str:
        steps = result.get("assisted_steps") or []
        if not steps:
            return ""
        parts = [f"{len(s['drafted'])} proposed ({html.escape(''.join(s['drafted_text']))!s}), {s['accepted']} "
                 "accepted" for s in steps]
        return "<div class='step-method'>drafts this step: " + "; ".join(parts) + "</div>"

"""What contrastive search weighed for each token: a line in the token's tooltip, a summary under the token view,
a table in the panel a click on the token opens, and a line under step mode's candidates.

Its registry entry names this view (`Strategy.view`); it reads the strategy's own token records
(strategy_records.Candidate): the top_k candidates with the model's probability, the degeneration penalty
(greatest similarity to the text so far) and the score that chose.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from playground.result import TokenRecord
from playground.strategy_records.contrastive import Candidate
from playground.ui.contrastive_card import CANDIDATES_CARD
from playground.ui.strategy_view import StrategyView

# the mark of a token that is not the model's own top one (DoLa's view marks its changed tokens the same way)
CONTRAST_LEGEND = "<span class='tok contrast'>not the model's top token (contrastive search, DoLa)</span>"
CONTRAST_CSS = """
.tok.contrast { border-bottom: 3px dotted #9333ea; }
.dark .tok.contrast { border-bottom-color: #c084fc; }
"""



class ContrastiveView(StrategyView):
    """Contrastive search's candidates: the tooltip's scores, the marked tokens a less probable candidate won,
    and the clicked token's table."""

    legend = (CONTRAST_LEGEND,)
    css = CONTRAST_CSS
    card = CANDIDATES_CARD

    def tooltip_lines(self, token: TokenRecord) -> list[str]:
        candidates = token.get("contrastive")
        if not candidates:
            return []
        chosen = _chosen(candidates, token["id"])
        return [f"contrastive search, {len(candidates)} candidates (p · penalty → score):",
                *(f"  {c['text']!r}: {c['p']:.3f} · {c['penalty']:.3f} → {c['score']:.3f}"
                  + (" ◀" if c is chosen else "") for c in candidates)]

    def token_classes(self, token: TokenRecord) -> list[str]:
        candidates = token.get("contrastive")
        return ["contrast"] if candidates and candidates[0]["id"] != token["id"] else []

    def below_tokens(self, tokens: Sequence[TokenRecord]) -> str:
        weighed = [t for t in tokens if t.get("contrastive")]
        if not weighed:
            return ""
        other = sum(1 for t in weighed if self.token_classes(t))
        return (f"<div class='method-note'>contrastive search: a less probable candidate won on its score at "
                f"{other} of {len(weighed)} tokens (marked: its penalty for resembling the text was lower)</div>")

    def panel_html(self, record: TokenRecord, spec: Mapping[str, Any]) -> str:
        candidates = record.get("contrastive")
        if not candidates:
            return ""
        alpha = float(spec.get("penalty_alpha", 0.6))
        chosen = _chosen(candidates, record["id"])
        rows = "".join(
            f"<tr{' class=chosen' if c is chosen else ''}><td><code>{html.escape(repr(c['text']))}</code></td>"
            f"<td>{c['p']:.3f}</td><td>{c['penalty']:.3f}</td><td>{c['score']:.3f}{' ◀' if c is chosen else ''}"
            "</td></tr>" for c in candidates)
        return (f"<div class='method-panel'><p>contrastive search weighed {len(candidates)} candidates: score = "
                f"(1 − {alpha:g})·p − {alpha:g}·penalty, where the penalty is the candidate's greatest cosine "
                "similarity to the text so far; the highest score is the token.</p><table class='cut-stages'><thead>"
                "<tr><th>candidate</th><th>p</th><th>penalty</th><th>score</th></tr></thead>"
                f"<tbody>{rows}</tbody></table></div>")

    def step_lines(self, record: TokenRecord) -> str:
        candidates = record.get("contrastive")
        if not candidates:
            return ""
        best = max(candidates, key=lambda c: c["score"])
        return (f"<div class='step-method'>contrastive search: {html.escape(repr(best['text']))} scored "
                f"{best['score']:.3f} (p {best['p']:.3f}, degeneration penalty {best['penalty']:.3f})</div>")


def _chosen(candidates: Sequence[Candidate], token: int) -> Candidate | None:
    return next((c for c in candidates if c["id"] == token), None)

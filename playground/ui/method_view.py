"""What contrastive search and DoLa weighed for each token: a line in the token's tooltip, a summary under the
token view, and a table in the panel a click on the token opens.

Their registry entries name these views (`Strategy.view`); each reads its strategy's own token records
(strategy_records.Candidate, DolaRecord): contrastive search's top_k candidates with the model's probability, the
degeneration penalty (greatest similarity to the text so far) and the score that chose; DoLa's premature layer
and whether the contrast took another token than the final layer's own top.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from playground.backends.dola_layers import CONTRAST_STAGE
from playground.result import TokenRecord
from playground.strategy_records import Candidate
from playground.ui.strategy_view import StrategyView

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


class DolaView(StrategyView):
    """DoLa's contrast: the layer in the tooltip, the marked tokens it changed, the layers' table, and its
    contrast named as a stage of its own ahead of the logits chain."""

    legend = (CONTRAST_LEGEND,)
    css = CONTRAST_CSS

    def tooltip_lines(self, token: TokenRecord) -> list[str]:
        dola = token.get("dola")
        if not dola:
            return []
        lines = [f"DoLa: layer {dola['layer']} contrasted with the final layer"]
        if dola["changed"]:
            lines.append(f"  the final layer alone would have taken {dola['greedy_text']!r}")
        return lines

    def token_classes(self, token: TokenRecord) -> list[str]:
        dola = token.get("dola")
        return ["contrast"] if dola and dola["changed"] else []

    def below_tokens(self, tokens: Sequence[TokenRecord]) -> str:
        dola = [d for t in tokens if (d := t.get("dola"))]
        if not dola:
            return ""
        changed = sum(1 for d in dola if d["changed"])
        used = ", ".join(f"{layer} ×{count}" for layer, count in sorted(Counter(d["layer"] for d in dola).items()))
        return (f"<div class='method-note'>DoLa: the contrast took another token than the final layer's own top "
                f"at {changed} of {len(dola)} tokens (marked); premature layers used: {used}</div>")

    def panel_html(self, record: TokenRecord, spec: Mapping[str, Any]) -> str:
        dola = record.get("dola")
        if not dola:
            return ""
        rows = "".join(f"<tr{' class=chosen' if layer == dola['layer'] else ''}><td>{layer}</td><td>{js:.6f}</td>"
                       f"</tr>" for layer, js in zip(dola["layers"], dola["js"], strict=True))
        alone = html.escape(repr(dola["greedy_text"]))
        verdict = (f"the contrast changed the token: the final layer alone would have taken <code>{alone}</code>, "
                   "the chart's top candidate" if dola["changed"] else "the final layer's own top token, kept by the "
                   "contrast")
        return (f"<div class='method-panel'><p>DoLa contrasted layer <b>{dola['layer']}</b> (the candidate most "
                f"unlike the final layer) with the final layer: {verdict}. The chart's model p is the final "
                "layer's own; the contrast is the first stage below, ahead of the logits chain.</p>"
                "<table class='cut-stages'><thead><tr>"
                "<th>candidate layer</th><th title='Jensen-Shannon divergence from the final layer’s next-token "
                f"distribution'>JS divergence</th></tr></thead><tbody>{rows}</tbody></table></div>")

    def stage_labels(self, record: TokenRecord) -> dict[str, str]:
        dola = record.get("dola")
        if not dola:
            return {}
        return {CONTRAST_STAGE: f"DoLa's contrast (final layer − layer {dola['layer']}, within a tenth of its top)"}


def _chosen(candidates: Sequence[Candidate], token: int) -> Candidate | None:
    return next((c for c in candidates if c["id"] == token), None)

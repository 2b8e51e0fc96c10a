"""What DoLa weighed for each token: the premature layer in the token's tooltip, a summary under the token view,
the layers' table in the panel a click on the token opens, its contrast named as a stage of its own, and a line
under step mode's candidates.

Its registry entry names this view (`Strategy.view`); it reads the strategy's own token records
(strategy_records.DolaRecord): the premature layer and whether the contrast took another token than the final
layer's own top.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from playground.backends.dola_layers import CONTRAST_STAGE
from playground.result import TokenRecord
from playground.ui.card_part import CardPart
from playground.ui.contrastive_view import CONTRAST_CSS, CONTRAST_LEGEND
from playground.ui.strategy_view import StrategyView


class DolaCard(CardPart):
    """DoLa's part of the column card: a note that pairs its layers with a repetition penalty."""

    notes = {"dola_layers": "the generation guide pairs DoLa with a repetition penalty of 1.2 (under “more: min "
                            "tokens, penalties”): the contrast alone tends to repeat itself"}


class DolaView(StrategyView):
    """DoLa's contrast: the layer in the tooltip, the marked tokens it changed, the layers' table, and its
    contrast named as a stage of its own ahead of the logits chain."""

    legend = (CONTRAST_LEGEND,)
    css = CONTRAST_CSS
    card = DolaCard()

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

    def step_lines(self, record: TokenRecord) -> str:
        dola = record.get("dola")
        if not dola:
            return ""
        return (f"<div class='step-method'>DoLa contrasted layer {dola['layer']}; the final layer alone would take "
                f"{html.escape(repr(dola['greedy_text']))}</div>")

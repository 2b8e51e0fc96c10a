"""What contrastive search and DoLa weighed for each token: a line in the token's tooltip, a summary under the
token view, and a table in the panel a click on the token opens.

Pure functions of the token records (result.Candidate, result.DolaRecord): contrastive search's top_k candidates
with the model's probability, the degeneration penalty (greatest similarity to the text so far) and the score
that chose; DoLa's premature layer and whether the contrast took another token than the final layer's own top.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from playground.backends.dola_layers import CONTRAST_STAGE
from playground.result import Candidate, TokenRecord


def tooltip_lines(token: TokenRecord) -> list[str]:
    """The tooltip's lines on the method: the chosen candidate's score, or the layer DoLa contrasted."""
    lines: list[str] = []
    if candidates := token.get("contrastive"):
        chosen = _chosen(candidates, token["id"])
        lines.append(f"contrastive search, {len(candidates)} candidates (p · penalty → score):")
        lines += [f"  {c['text']!r}: {c['p']:.3f} · {c['penalty']:.3f} → {c['score']:.3f}"
                  + (" ◀" if c is chosen else "") for c in candidates]
    if dola := token.get("dola"):
        lines.append(f"DoLa: layer {dola['layer']} contrasted with the final layer")
        if dola["changed"]:
            lines.append(f"  the final layer alone would have taken {dola['greedy_text']!r}")
    return lines


def token_classes(token: TokenRecord) -> list[str]:
    """Classes that mark a token where the method took another token than the model's own top one."""
    dola = token.get("dola")
    if dola and dola["changed"]:
        return ["contrast"]
    candidates = token.get("contrastive")
    if candidates and candidates[0]["id"] != token["id"]:
        return ["contrast"]
    return []


def summary_html(tokens: Sequence[TokenRecord] | None) -> str:
    """One line under the token view: how often the method overrode the most likely token, and (DoLa) which
    layers it contrasted with how often."""
    tokens = tokens or []
    dola = [t["dola"] for t in tokens if t.get("dola")]
    weighed = [t for t in tokens if t.get("contrastive")]
    if dola:
        changed = sum(1 for d in dola if d and d["changed"])
        layers = Counter(d["layer"] for d in dola if d)
        used = ", ".join(f"{layer} ×{count}" for layer, count in sorted(layers.items()))
        return (f"<div class='method-note'>DoLa: the contrast took another token than the final layer's own top "
                f"at {changed} of {len(dola)} tokens (marked); premature layers used: {used}</div>")
    if weighed:
        other = sum(1 for t in weighed if token_classes(t))
        return (f"<div class='method-note'>contrastive search: a less probable candidate won on its score at "
                f"{other} of {len(weighed)} tokens (marked: its penalty for resembling the text was lower)</div>")
    return ""


def panel_html(record: TokenRecord, spec: Mapping[str, Any]) -> str:
    """The clicked token's method table: contrastive search's candidates, or DoLa's layers; '' for other
    strategies."""
    if candidates := record.get("contrastive"):
        return _candidates_table(candidates, record["id"], spec)
    if dola := record.get("dola"):
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
    return ""


def stage_labels(record: TokenRecord) -> dict[str, str]:
    """The name of a strategy's own stage ahead of the logits chain in this token's record: DoLa's contrast."""
    dola = record.get("dola")
    if not dola:
        return {}
    return {CONTRAST_STAGE: f"DoLa's contrast (final layer − layer {dola['layer']}, within a tenth of its top)"}


def _chosen(candidates: Sequence[Candidate], token: int) -> Candidate | None:
    return next((c for c in candidates if c["id"] == token), None)


def _candidates_table(candidates: Sequence[Candidate], token: int, spec: Mapping[str, Any]) -> str:
    alpha = float(spec.get("penalty_alpha", 0.6))
    chosen = _chosen(candidates, token)
    rows = "".join(
        f"<tr{' class=chosen' if c is chosen else ''}><td><code>{html.escape(repr(c['text']))}</code></td>"
        f"<td>{c['p']:.3f}</td><td>{c['penalty']:.3f}</td><td>{c['score']:.3f}{' ◀' if c is chosen else ''}</td></tr>"
        for c in candidates)
    return (f"<div class='method-panel'><p>contrastive search weighed {len(candidates)} candidates: score = "
            f"(1 − {alpha:g})·p − {alpha:g}·penalty, where the penalty is the candidate's greatest cosine "
            "similarity to the text so far; the highest score is the token.</p><table class='cut-stages'><thead><tr>"
            "<th>candidate</th><th>p</th><th>penalty</th><th>score</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div>")

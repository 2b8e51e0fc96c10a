"""Token view: a run's tokens coloured by probability or entropy, and where two columns' outputs first diverge."""

from __future__ import annotations

import html
from collections.abc import Sequence

from playground.result import PrefixRecord, Result, TokenRecord
from playground.ui.constraint_view import token_classes as constraint_classes
from playground.ui.constraint_view import tooltip_lines as constraint_lines
from playground.ui.constraint_view import verdict_html
from playground.ui.strategy_view import NO_VIEW, StrategyView, legend_spans

# colour mode -> (token record key, kind): what the user colours tokens by
COLOUR_MODES = {
    "probability (as drawn)": ("p", "probability"),
    "model probability": ("p_model", "probability"),
    "entropy (as drawn)": ("entropy", "entropy"),
    "model entropy": ("entropy_model", "entropy"),
}
DEFAULT_COLOUR = "probability (as drawn)"
ENTROPY_SCALE = 4.0  # nats at which the colour saturates; SmolLM2's uncertain steps sit around 3-5 nats


def _hue(token: TokenRecord, by: str) -> float | None:
    """0 (red, surprising) .. 120 (green, confident); None when the backend recorded nothing."""
    key, kind = COLOUR_MODES.get(by, COLOUR_MODES[DEFAULT_COLOUR])
    value = token.get(key)
    if not isinstance(value, (int, float)):
        return None
    if kind == "entropy":
        return 120.0 * (1.0 - min(max(value, 0.0) / ENTROPY_SCALE, 1.0))
    return 120.0 * min(max(value, 0.0), 1.0)


def shown(text: str) -> str:
    """Whitespace made visible, so a newline or a leading space is a token you can see and hover. The line
    breaks themselves go after the token's span (`_breaks`): inside it, an outline would draw an empty box at
    the end of the line."""
    escaped = html.escape(text).replace("\n", "↵").replace("\t", "→")
    return escaped if text.strip() else escaped.replace(" ", "·") or "∅"


def _breaks(text: str) -> str:
    return "<br>" * text.count("\n")


def _tooltip(index: int, token: TokenRecord, view: StrategyView, vocab_size: int | None = None) -> str:
    lines = [f"#{index} {token['text']!r} (id {token['id']})"]
    if token["p"] is not None and token["entropy"] is not None:
        lines.append(f"as drawn: p={token['p']:.3f}, entropy={token['entropy']:.2f} nats")
    if token["p_model"] is not None and token["entropy_model"] is not None:
        lines.append(f"model: p={token['p_model']:.3f}, entropy={token['entropy_model']:.2f} nats")
    lines += view.tooltip_lines(token)
    if token["top"]:
        lines.append("model's top tokens (as drawn · model):")
    for text, p, p_model in token["top"] or []:
        lines.append(f"  {text!r}: {p:.3f} · {p_model:.3f}")
    return "\n".join(lines + constraint_lines(token, vocab_size))


def _forced_spans(prefix: PrefixRecord | None) -> list[str]:
    """A branch's forced tokens, set apart from what was generated; positions count from the first of them."""
    if not prefix:
        return []
    return [f"<span class='tok forced' data-pos='{index}' title=\"#{index} {html.escape(repr(piece), quote=True)}: "
            f"forced (the branch's prefix)\">{shown(piece)}</span>{_breaks(piece)}"
            for index, piece in enumerate(prefix["pieces"])]


def tokens_html(tokens: Sequence[TokenRecord] | None, by: str = DEFAULT_COLOUR, diverge_at: int | None = None,
                prefix: PrefixRecord | None = None, vocab_size: int | None = None,
                view: StrategyView = NO_VIEW, result: Result | None = None, *, pickable: bool = True) -> str:
    """One span per token: background by `by`, title with the top alternatives, a branch's forced prefix first,
    and what the column's strategy's `view` draws of its own records (marks, tooltip lines, HTML before a token
    and a summary under them; `result` is the run they come from). `data-pos` numbers the prefix and the tokens,
    for the sampling cut a click opens (a run's tokens; not `pickable`: tokens that are not the last
    run's, whose cut the page cannot open).

    Focusable, so a tap (no hover on a phone) opens the alternatives: the page's CSS shows the title on focus.
    """
    if not tokens and not prefix:
        return "<div class='tokens empty'>tokens appear here after a run</div>"
    spans = _forced_spans(prefix)
    offset = len(spans)
    before = view.before_tokens(result, shown) if result is not None else {}
    for index, token in enumerate(tokens or []):
        if index in before:
            spans.append(before[index])
        classes = ["tok"]
        if diverge_at is not None and index == diverge_at:
            classes.append("diverge")
        classes += view.token_classes(token) + constraint_classes(token)
        hue = _hue(token, by)
        style = f" style='background:hsl({hue:.0f},75%,82%)'" if hue is not None else ""
        title = html.escape(_tooltip(index, token, view, vocab_size), quote=True)
        text = shown(token["text"])
        position = f" data-pos='{offset + index}'" if pickable else ""
        spans.append(f"<span class='{' '.join(classes)}'{style} tabindex='0'{position} "
                     f"title=\"{title}\">{text}</span>{_breaks(token['text'])}")
    return "<div class='tokens'>" + "".join(spans) + "</div>" + view.below_tokens(tokens or [])


def result_tokens_html(result: Result, view: StrategyView, by: str = DEFAULT_COLOUR,
                       diverge_at: int | None = None) -> str:
    """A finished column's token view: what its strategy's view draws above the tokens, the tokens, and the
    constraint's verdict under them."""
    constraint = result.get("constraint") or None
    return view.above_tokens(result) + tokens_html(
        result["tokens"], by, diverge_at, result.get("prefix"), constraint["vocab_size"] if constraint else None,
        view, result) + verdict_html(result)


def legend_html(by: str) -> str:
    kind = COLOUR_MODES.get(by, COLOUR_MODES[DEFAULT_COLOUR])[1]
    low, high = ("low p", "high p") if kind == "probability" else (f"≥{ENTROPY_SCALE:g} nats", "0 nats")
    return (f"<div class='tok-legend'><span class='tok' style='background:hsl(0,75%,82%)'>{low}</span> → "
            f"<span class='tok' style='background:hsl(120,75%,82%)'>{high}</span> · "
            + "".join(f"{span} · " for span in legend_spans())
            + "<span class='tok diverge'>first divergence</span> · <span class='tok forced'>forced (branch)</span> · "
            "<span class='tok masked'>the constraint masked the model's top token</span>"
            " · hover a token for its top alternatives, click or tap it for its sampling cut</div>")


def token_texts(result: Result | None) -> list[str]:
    """The generated tokens of a result's first sequence as text; ids stand in when texts are absent."""
    if not result:
        return []
    if result["tokens"]:
        return [t["text"] for t in result["tokens"]]
    return [f"<{i}>" for i in result["token_ids"]]


def token_ids(result: Result | None) -> list[int]:
    return list(result["token_ids"]) if result else []


def first_divergence(a: Result, b: Result) -> tuple[int, str, str] | None:
    """(token index, a's token, b's token) where the outputs first differ, or None when they are identical.

    Compared on token ids, since two tokenizations of the same text are the same output for this purpose
    only when the ids agree; a run that ended earlier differs at its end, shown as "(end)".
    """
    ids_a, ids_b = token_ids(a), token_ids(b)
    texts_a, texts_b = token_texts(a), token_texts(b)
    for index in range(max(len(ids_a), len(ids_b))):
        left = ids_a[index] if index < len(ids_a) else None
        right = ids_b[index] if index < len(ids_b) else None
        if left != right:
            return (index, texts_a[index] if left is not None and index < len(texts_a) else "(end)",
                    texts_b[index] if right is not None and index < len(texts_b) else "(end)")
    return None


def divergence_report(results: Sequence[Result | None], labels: Sequence[str]) -> str:
    """Markdown: for each pair of finished columns, the first token where they differ."""
    done = [(label, r) for label, r in zip(labels, results, strict=True) if r]
    if len(done) < 2:
        return "Run two or more columns to see where their outputs diverge."
    lines = []
    for i, (label_a, a) in enumerate(done):
        for label_b, b in done[i + 1:]:
            found = first_divergence(a, b)
            if found is None:
                lines.append(f"- **{label_a}** = **{label_b}**: identical ({len(token_ids(a))} tokens)"
                             f"{_beyond_the_best(a, b)}")
            else:
                index, left, right = found
                lines.append(f"- **{label_a}** vs **{label_b}**: first differ at token {index}: "
                             f"`{left!r}` vs `{right!r}`")
    return "\n".join(lines)


def _beyond_the_best(a: Result, b: Result) -> str:
    """Beam search: where two columns with the same best sequence still differ (their other returned sequences,
    their scores), so that a knob such as the length penalty does not read as inert."""
    if not a["scores"] or not b["scores"]:
        return ""
    differ = next((i for i, (x, y) in enumerate(zip(a["sequences"], b["sequences"], strict=False)) if x != y), None)
    if differ is None and len(a["sequences"]) != len(b["sequences"]):
        differ = min(len(a["sequences"]), len(b["sequences"]))
    if differ is not None:
        return f"; the returned sequences differ from the {ordinal(differ + 1)} on"
    if any(abs(x - y) > 1e-4 for x, y in zip(a["scores"], b["scores"], strict=False)):
        return f"; the same sequences returned, scored {a['scores'][0]:.3f} against {b['scores'][0]:.3f}"
    return ""


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th ... 11th, 12th, 13th, 21st."""
    last = n % 10 if n % 100 not in (11, 12, 13) else 0
    return f"{n}{'st' if last == 1 else 'nd' if last == 2 else 'rd' if last == 3 else 'th'}"


def divergence_from_first(results: Sequence[Result | None]) -> list[int | None]:
    """Per column, the index where it leaves the first finished column's output (None: same or nothing to compare)."""
    reference = next((r for r in results if r), None)
    marks: list[int | None] = []
    for result in results:
        found = first_divergence(reference, result) if result and reference and result is not reference else None
        marks.append(found[0] if found else None)
    return marks


"""What a constraint cost, on the page: per token (the tooltip, a mark where the mask took out the model's top
token) and per column (the verdict under the token view: valid, incomplete or invalid, and the mask's cost).

Pure functions of the Result: the token records' `constraint` stage (tokens removed, mass removed) and their
alternatives (the model's own top token, and whether the mask removed it), and the result's `constraint` record.
"""

from __future__ import annotations

import html

from playground.result import ConstraintRecord, Result, TokenRecord

STAGE = "constraint"


def _stage(token: TokenRecord) -> tuple[int, float] | None:
    """(tokens removed, mass removed) by the mask at this token; None where no mask ran."""
    for row in token.get("stages") or []:
        if row["stage"] == STAGE:
            return row["removed"], row["moved"]
    return None


def masked_top(token: TokenRecord) -> bool:
    """Whether the mask took out the model's most likely token here (it changed the choice)."""
    alternatives = token.get("alternatives") or []
    return bool(alternatives) and alternatives[0]["removed_by"] == STAGE


def tooltip_lines(token: TokenRecord, vocab_size: int | None) -> list[str]:
    found = _stage(token)
    if found is None:
        return []
    removed, mass = found
    allowed = f"{vocab_size - removed:,} of {vocab_size:,}" if vocab_size else f"all but {removed:,}"
    lines = [f"constraint: {allowed} tokens allowed, {mass:.3f} of the model's probability masked out"]
    alternatives = token.get("alternatives") or []
    if alternatives and masked_top(token):
        top = alternatives[0]
        lines.append(f"  the model's top token {top['text']!r} (p {top['p_model']:.3f}) was not allowed")
    return lines


def token_classes(token: TokenRecord) -> list[str]:
    return ["masked"] if masked_top(token) else []


def verdict_html(result: Result | None) -> str:
    """The line under a constrained column's token view; '' for a run without a constraint."""
    record: ConstraintRecord | None = result.get("constraint") if result else None
    if not record:
        return ""
    ok = record["valid"]
    head = (f"<b>constraint ({html.escape(record['kind'])}): {html.escape(record['verdict'])}</b>"
            f" · checked by {html.escape(record['checked_by'])}")
    if not ok and record["verdict"].startswith("incomplete"):
        head += " · raise max new tokens to let it finish"
    valid = record["sequences_valid"]
    if len(valid) > 1:
        head += f" · {sum(valid)} of {len(valid)} returned sequences valid"
    cost = ""
    if record["changed_steps"] is not None and result is not None:
        steps = len(result["tokens"])
        cost = (f"<br>the mask took out the model's top token at {record['changed_steps']} of {steps} steps "
                f"(marked), removing {record['mass_removed_mean'] or 0.0:.3f} of the probability per step on average")
    kind = "ok" if ok else "bad"
    return f"<div class='constraint-note {kind}'>{'✓' if ok else '⚠'} {head}{cost}</div>"

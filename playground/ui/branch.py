"""Branch at a token: a click on a token opens its sampling cut; "continue from here with" an alternative runs
every column again from that prefix (the output up to the token, then the chosen alternative, forced)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground.result import Result
from playground.ui.cut import NOTHING_PICKED, branch_choices, branch_prefix, cut_html, cut_rows
from playground.ui.events import Updates
from playground.ui.outcome import Outcome
from playground.ui.page import Page
from playground.ui.run import run_given


@dataclass(frozen=True)
class Picked:
    """The token a person clicked: the column slot and its position over the forced prefix and the output."""

    slot: int
    position: int


def _picked_result(outcome: Outcome, picked: Picked | None) -> Result | None:
    if picked is None or not 0 <= picked.slot < len(outcome["results"]):
        return None
    return outcome["results"][picked.slot]


def why_no_branch(outcome: Outcome, picked: Picked | None) -> str | None:
    """Why "continue from here" cannot run now, or None when it can."""
    result = _picked_result(outcome, picked)
    if result is None:
        return NOTHING_PICKED
    settings = outcome["settings"]
    if settings is not None and settings.get("mode") == "chat":
        return "branching continues one prompt; switch the prompt format off chat and run again"
    if not branch_choices(result, picked.position if picked else None):
        return "this token has no recorded alternatives (a forced token, or a beam / assisted column)"
    return None


def pick(page: Page, outcome: Outcome, slot: int, position: Any) -> Updates:
    """The sampling cut of the clicked token, its alternatives to continue with, and whether a branch can run."""
    picked = Picked(slot, int(position)) if isinstance(position, (int, float)) else None
    result = _picked_result(outcome, picked)
    label = str(outcome["labels"][slot] or f"column {slot + 1}")
    choices = branch_choices(result, picked.position if picked else None)
    reason = why_no_branch(outcome, picked)
    default = next((token for text, token in choices if "(as drawn)" not in text), None)
    return {
        page.cut: cut_html(result, picked.position if picked else None, label),
        page.branch_choice: gr.update(choices=choices, value=default, interactive=bool(choices)),
        page.branch: gr.update(interactive=reason is None,
                               value="↪ continue from here in every column" if reason is None
                               else f"↪ continue from here ({reason})"),
        page.picked: picked,
    }


def branch_specs(outcome: Outcome, picked: Picked, token_id: int) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """Each column's RunSpec as it ran, with the branch's forced prefix; columns that cannot take it, and why.

    Token ids belong to the clicked column's model, so a column on another model (another vocabulary) is left out.
    """
    source = outcome["results"][picked.slot]
    assert source is not None
    prefix = branch_prefix(source, picked.position, token_id)
    model = source["spec"]["model"]
    specs: dict[int, dict[str, Any]] = {}
    refused: dict[int, str] = {}
    for i, (result, name) in enumerate(zip(outcome["results"], outcome["labels"], strict=True)):
        if name is None:
            continue
        if result is None:
            refused[i] = "not branched: it did not run"
        elif result["spec"]["model"] != model:
            refused[i] = f"not branched: it runs {result['spec']['model']}, and the forced ids are {model}'s tokens"
        else:
            specs[i] = {**result["spec"], "prefix_ids": prefix, "repeats": 1}
    return specs, refused


def _chosen_text(outcome: Outcome, picked: Picked, token_id: int) -> str:
    result = outcome["results"][picked.slot]
    assert result is not None
    forced = len((result.get("prefix") or {"ids": []})["ids"])
    rows = cut_rows(result["tokens"][picked.position - forced], result["spec"])
    return next(row["text"] for row in rows if row["id"] == token_id)


def prefix_text(outcome: Outcome, picked: Picked, token_id: int) -> str:
    """The forced tokens as text (their pieces joined), which the outputs start with while they stream."""
    result = outcome["results"][picked.slot]
    assert result is not None
    pieces = list((result.get("prefix") or {"pieces": []})["pieces"]) + [t["text"] for t in result["tokens"]]
    return "".join(pieces[:picked.position]) + _chosen_text(outcome, picked, token_id)


def cut_outputs(page: Page) -> list[Any]:
    """What `pick` and `reset` set."""
    return [page.cut, page.branch_choice, page.branch, page.picked]


def reset(page: Page) -> Updates:
    """Nothing picked: a new run's tokens are not the ones the chart showed."""
    return {page.cut: cut_html(None, None, ""), page.picked: None,
            page.branch_choice: gr.update(choices=[], value=None, interactive=False),
            page.branch: gr.update(interactive=False, value=f"↪ continue from here ({NOTHING_PICKED})")}


def branch_all(page: Page, outcome: Outcome, picked: Picked | None, token_id: Any, colour_by: str,
               request: gr.Request, progress: gr.Progress) -> Iterator[Updates]:
    """Every column again from the branch's prefix; refused (with the reason) when no branch can run."""
    reason = why_no_branch(outcome, picked)
    if reason is None and token_id is None:
        reason = "pick an alternative to continue with"
    if reason is not None or picked is None:
        yield {page.status: f"⚠ **not branched:** {reason}"}
        return
    specs, refused = branch_specs(outcome, picked, int(token_id))
    text = prefix_text(outcome, picked, int(token_id))
    column = outcome["labels"][picked.slot] or f"column {picked.slot + 1}"
    note = (f" ↪ Continued from token {picked.position} of column {column} with "
            f"{_chosen_text(outcome, picked, int(token_id))!r}: {picked.position + 1} forced token(s).")
    yield from run_given(page, outcome, specs, refused, text, note, colour_by, request, progress)

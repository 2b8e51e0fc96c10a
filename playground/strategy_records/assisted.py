"""Assisted decoding's records in the Result: `tokens[i].draft` and `assisted_steps`."""

from __future__ import annotations

from typing import Any, TypedDict

from playground.backends.base import GenerationOutput


class AssistRecord(TypedDict):
    """One verification step of assisted decoding: drafted token ids (main vocabulary), their texts, and how
    many of them, from the first, the main model accepted."""

    drafted: list[int]
    drafted_text: list[str]
    accepted: int


def draft_flags(tokenizer: Any, output: GenerationOutput) -> list[bool] | None:
    """Per token, whether it was an accepted draft (True) or the main model's own (False)."""
    return list(output.draft_flags) if output.draft_flags else None


def assisted_steps(tokenizer: Any, output: GenerationOutput) -> list[AssistRecord] | None:
    """The assisted steps with each drafted token's text (a rejected draft is shown by its text)."""
    if output.assisted_steps is None:
        return None
    return [{"drafted": list(step["drafted"]), "drafted_text": [tokenizer.decode([i]) for i in step["drafted"]],
             "accepted": step["accepted"]} for step in output.assisted_steps]

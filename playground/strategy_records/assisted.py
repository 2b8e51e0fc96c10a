"""Assisted decoding's records: what a backend records (`draft_flags`, `assisted_steps`, `acceptance_rate`), what
the Result shows (`tokens[i].draft`, `assisted_steps`, `metrics.acceptance_rate`), and the builders between them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired, Protocol, TypedDict


class AssistStep(TypedDict):
    """One verification step of assisted decoding (token ids in the main model's vocabulary)."""

    drafted: list[int]  # what the draft proposed (may be empty: prompt lookup found no match)
    accepted: int  # how many of them, from the first, the main model kept; the rest were rejected


@dataclass(kw_only=True)
class AssistOutputs:
    """A backend's output fields of assisted decoding."""

    acceptance_rate: float | None = None  # accepted draft tokens / proposed draft tokens
    draft_flags: list[bool] | None = None  # True where the token was an accepted draft token
    assisted_steps: list[AssistStep] | None = None  # per verification step, drafted and accepted


class AssistRecord(TypedDict):
    """One verification step of assisted decoding: drafted token ids (main vocabulary), their texts, and how
    many of them, from the first, the main model accepted."""

    drafted: list[int]
    drafted_text: list[str]
    accepted: int


class AssistTokenRecord(TypedDict):
    """The Result's token record: an accepted draft token (True) or the main model's own (False)."""

    draft: NotRequired[bool | None]


class AssistRunRecords(TypedDict):
    """The Result's run record: per verification step, drafted and accepted (None on the other strategies)."""

    assisted_steps: list[AssistRecord] | None


class AssistMetrics(TypedDict):
    """The Result's metric: the share of drafted tokens the main model accepted (None on the others)."""

    acceptance_rate: float | None


class _Recorded(Protocol):
    """What the builders read of a backend's output."""

    @property
    def acceptance_rate(self) -> float | None: ...

    @property
    def draft_flags(self) -> list[bool] | None: ...

    @property
    def assisted_steps(self) -> list[AssistStep] | None: ...


def draft_flags(tokenizer: Any, output: _Recorded) -> list[bool] | None:
    """Per token, whether it was an accepted draft (True) or the main model's own (False)."""
    return list(output.draft_flags) if output.draft_flags else None


def assisted_steps(tokenizer: Any, output: _Recorded) -> list[AssistRecord] | None:
    """The assisted steps with each drafted token's text (a rejected draft is shown by its text)."""
    if output.assisted_steps is None:
        return None
    return [{"drafted": list(step["drafted"]), "drafted_text": [tokenizer.decode([i]) for i in step["drafted"]],
             "accepted": step["accepted"]} for step in output.assisted_steps]


def assist_metrics(output: _Recorded) -> AssistMetrics:
    """The metrics block's share of drafts accepted."""
    return {"acceptance_rate": output.acceptance_rate}

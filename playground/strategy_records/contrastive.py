"""Contrastive search's records: what a backend records per token (`candidates`), what the Result shows
(`tokens[i].contrastive`), and the builder between them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, Protocol, TypedDict

# One candidate as a backend records it: (token id, p after the logits processors, degeneration penalty = greatest
# cosine similarity to the context, score = (1 - α)·p - α·penalty)
CandidateInfo = tuple[int, float, float, float]


class ContrastiveTokenInfo(TypedDict, total=False):
    """A backend's record of one token: the top_k candidates weighed, most probable first."""

    candidates: list[CandidateInfo]


class Candidate(TypedDict):
    """Contrastive search: one of the top_k candidates it weighed for a token."""

    id: int
    text: str
    p: float  # the model's probability (after the penalties of the logits chain, as transformers computed it)
    penalty: float  # degeneration penalty: the candidate's greatest cosine similarity to the text so far
    score: float  # (1 - penalty_alpha)·p - penalty_alpha·penalty: the highest is the token


class ContrastiveTokenRecord(TypedDict):
    """The Result's token record: the candidates, most probable first (None on other strategies' tokens)."""

    contrastive: NotRequired[list[Candidate] | None]


class _Recorded(Protocol):
    """What the builder reads of a backend's output."""

    @property
    def token_info(self) -> Sequence[ContrastiveTokenInfo] | None: ...


def contrastive_candidates(tokenizer: Any, output: _Recorded) -> list[list[Candidate] | None] | None:
    """Per token, the candidates contrastive search weighed, most probable first."""
    if not output.token_info:
        return None
    return [[{"id": int(i), "text": tokenizer.decode([i]), "p": round(p, 5), "penalty": round(penalty, 5),
              "score": round(score, 5)} for i, p, penalty, score in known["candidates"]]
            if "candidates" in known else None for known in output.token_info]

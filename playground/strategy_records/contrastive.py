"""Contrastive search's records in the Result: `tokens[i].contrastive`, the candidates it weighed per token."""

from __future__ import annotations

from typing import Any, TypedDict

from playground.backends.base import GenerationOutput


class Candidate(TypedDict):
    """Contrastive search: one of the top_k candidates it weighed for a token."""

    id: int
    text: str
    p: float  # the model's probability (after the penalties of the logits chain, as transformers computed it)
    penalty: float  # degeneration penalty: the candidate's greatest cosine similarity to the text so far
    score: float  # (1 - penalty_alpha)·p - penalty_alpha·penalty: the highest is the token


def contrastive_candidates(tokenizer: Any, output: GenerationOutput) -> list[list[Candidate] | None] | None:
    """Per token, the candidates contrastive search weighed, most probable first."""
    if not output.token_info:
        return None
    return [[{"id": int(i), "text": tokenizer.decode([i]), "p": round(p, 5), "penalty": round(penalty, 5),
              "score": round(score, 5)} for i, p, penalty, score in known["candidates"]]
            if "candidates" in known else None for known in output.token_info]

"""The beam strategies' record in the Result: `beam_tree`, every candidate each search step weighed."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from playground.backends.base import GenerationOutput


class BeamRecord(TypedDict):
    """A beam-search candidate as the Result shows it (see backends.base.BeamNode)."""

    parent: int | None
    token: int
    text: str
    score: float
    kept: bool
    finished: bool
    chosen: bool
    group: NotRequired[int]  # diverse beam search: the hypothesis's group
    penalty: NotRequired[float]  # diverse beam search: the diversity penalty its token paid (in `score`)


def beam_tree(tokenizer: Any, output: GenerationOutput) -> list[list[BeamRecord]] | None:
    """The beam tree with each candidate's text."""
    if output.beam_tree is None:
        return None
    return [[{**node, "text": tokenizer.decode([node["token"]]), "score": round(node["score"], 5)}
             for node in step] for step in output.beam_tree]

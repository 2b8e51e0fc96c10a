"""The beam strategies' records: what a backend records (`beam_tree`, every candidate each search step weighed),
what the Result shows (`beam_tree`, with texts), and the builder between them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired, Protocol, TypedDict


class BeamNode(TypedDict):
    """One candidate of one beam-search step (a token id; the Result adds its text)."""

    parent: int | None  # index of the node it extends in the previous step; None at the first step
    token: int
    score: float  # cumulative log-probability of the hypothesis (before the length penalty)
    kept: bool  # continues as one of the live beams
    finished: bool  # ended here (EOS)
    chosen: bool  # on the path of the best returned sequence
    group: NotRequired[int]  # diverse beam search: the group of beams the hypothesis belongs to
    penalty: NotRequired[float]  # diverse beam search: the diversity penalty this token paid (in `score`)


@dataclass(kw_only=True)
class BeamOutputs:
    """A backend's output fields of a beam-type search."""

    beam_tree: list[list[BeamNode]] | None = None  # every step's candidates


class BeamRecord(TypedDict):
    """A beam-search candidate as the Result shows it (see BeamNode)."""

    parent: int | None
    token: int
    text: str
    score: float
    kept: bool
    finished: bool
    chosen: bool
    group: NotRequired[int]  # diverse beam search: the hypothesis's group
    penalty: NotRequired[float]  # diverse beam search: the diversity penalty its token paid (in `score`)


class BeamRunRecords(TypedDict):
    """The Result's run record: per step, every candidate weighed (None on the other strategies)."""

    beam_tree: list[list[BeamRecord]] | None


class _Recorded(Protocol):
    """What the builder reads of a backend's output."""

    @property
    def beam_tree(self) -> list[list[BeamNode]] | None: ...


def beam_tree(tokenizer: Any, output: _Recorded) -> list[list[BeamRecord]] | None:
    """The beam tree with each candidate's text."""
    if output.beam_tree is None:
        return None
    return [[{**node, "text": tokenizer.decode([node["token"]]), "score": round(node["score"], 5)}
             for node in step] for step in output.beam_tree]

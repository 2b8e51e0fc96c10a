"""The built-in strategies' own records as the Result holds them, and how a backend's output becomes them.

The registry's entries name these builders (`TokenRecords.build`, `RunRecords.build`); result.py calls the running
strategy's and knows none of them. The keys they land at are a contract (docs/api.md): `tokens[i].contrastive`,
`tokens[i].dola`, `tokens[i].draft`, `beam_tree` and `assisted_steps`.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from playground.backends.base import GenerationOutput


class Candidate(TypedDict):
    """Contrastive search: one of the top_k candidates it weighed for a token."""

    id: int
    text: str
    p: float  # the model's probability (after the penalties of the logits chain, as transformers computed it)
    penalty: float  # degeneration penalty: the candidate's greatest cosine similarity to the text so far
    score: float  # (1 - penalty_alpha)·p - penalty_alpha·penalty: the highest is the token


class DolaRecord(TypedDict):
    """DoLa: the contrast behind one token."""

    layer: int  # the premature layer contrasted with the final one
    layers: list[int]  # the candidate layers
    js: list[float]  # per candidate layer, its Jensen-Shannon divergence from the final layer
    greedy_id: int  # the final layer's own most likely token (what greedy decoding would have taken)
    greedy_text: str
    changed: bool  # the contrast took another token than greedy's


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


class AssistRecord(TypedDict):
    """One verification step of assisted decoding: drafted token ids (main vocabulary), their texts, and how
    many of them, from the first, the main model accepted."""

    drafted: list[int]
    drafted_text: list[str]
    accepted: int


def _first(output: GenerationOutput) -> list[int]:
    return output.sequences[0] if output.sequences else []


def contrastive_candidates(tokenizer: Any, output: GenerationOutput) -> list[list[Candidate] | None] | None:
    """Per token, the candidates contrastive search weighed, most probable first."""
    if not output.token_info:
        return None
    return [[{"id": int(i), "text": tokenizer.decode([i]), "p": round(p, 5), "penalty": round(penalty, 5),
              "score": round(score, 5)} for i, p, penalty, score in known["candidates"]]
            if "candidates" in known else None for known in output.token_info]


def dola_contrasts(tokenizer: Any, output: GenerationOutput) -> list[DolaRecord | None] | None:
    """Per token, the layer DoLa contrasted and whether that changed the final layer's own choice."""
    if not output.token_info:
        return None
    records: list[DolaRecord | None] = []
    for token, known in zip(_first(output), output.token_info, strict=False):
        contrast = known.get("dola")
        records.append(None if contrast is None else {
            "layer": contrast["layer"], "layers": list(contrast["layers"]),
            "js": [round(value, 6) for value in contrast["js"]], "greedy_id": contrast["final_top"],
            "greedy_text": tokenizer.decode([contrast["final_top"]]), "changed": contrast["final_top"] != token})
    return records


def draft_flags(tokenizer: Any, output: GenerationOutput) -> list[bool] | None:
    """Per token, whether it was an accepted draft (True) or the main model's own (False)."""
    return list(output.draft_flags) if output.draft_flags else None


def beam_tree(tokenizer: Any, output: GenerationOutput) -> list[list[BeamRecord]] | None:
    """The beam tree with each candidate's text."""
    if output.beam_tree is None:
        return None
    return [[{**node, "text": tokenizer.decode([node["token"]]), "score": round(node["score"], 5)}
             for node in step] for step in output.beam_tree]


def assisted_steps(tokenizer: Any, output: GenerationOutput) -> list[AssistRecord] | None:
    """The assisted steps with each drafted token's text (a rejected draft is shown by its text)."""
    if output.assisted_steps is None:
        return None
    return [{"drafted": list(step["drafted"]), "drafted_text": [tokenizer.decode([i]) for i in step["drafted"]],
             "accepted": step["accepted"]} for step in output.assisted_steps]

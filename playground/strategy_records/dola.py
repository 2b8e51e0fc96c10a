"""DoLa's records in the Result: `tokens[i].dola`, the contrast behind each token."""

from __future__ import annotations

from typing import Any, TypedDict

from playground.backends.base import GenerationOutput


class DolaRecord(TypedDict):
    """DoLa: the contrast behind one token."""

    layer: int  # the premature layer contrasted with the final one
    layers: list[int]  # the candidate layers
    js: list[float]  # per candidate layer, its Jensen-Shannon divergence from the final layer
    greedy_id: int  # the final layer's own most likely token (what greedy decoding would have taken)
    greedy_text: str
    changed: bool  # the contrast took another token than greedy's


def _first(output: GenerationOutput) -> list[int]:
    return output.sequences[0] if output.sequences else []


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

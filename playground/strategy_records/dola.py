"""DoLa's records: what a backend records per token (`dola`, the contrast), what the Result shows
(`tokens[i].dola`), and the builder between them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, Protocol, TypedDict


class DolaInfo(TypedDict):
    """What DoLa contrasted for one token, as a backend records it."""

    layer: int  # the premature layer contrasted with the final one at this step
    layers: list[int]  # the candidate premature layers
    js: list[float]  # per candidate layer, its Jensen-Shannon divergence from the final layer (the largest wins)
    final_top: int  # the final layer's own most likely token: greedy's choice, before the contrast


class DolaTokenInfo(TypedDict, total=False):
    """A backend's record of one token: the contrast behind it."""

    dola: DolaInfo


class DolaRecord(TypedDict):
    """DoLa: the contrast behind one token."""

    layer: int  # the premature layer contrasted with the final one
    layers: list[int]  # the candidate layers
    js: list[float]  # per candidate layer, its Jensen-Shannon divergence from the final layer
    greedy_id: int  # the final layer's own most likely token (what greedy decoding would have taken)
    greedy_text: str
    changed: bool  # the contrast took another token than greedy's


class DolaTokenRecord(TypedDict):
    """The Result's token record: the layer contrasted, and whether that changed greedy's choice."""

    dola: NotRequired[DolaRecord | None]


class _Recorded(Protocol):
    """What the builder reads of a backend's output."""

    @property
    def sequences(self) -> Sequence[Sequence[int]]: ...

    @property
    def token_info(self) -> Sequence[DolaTokenInfo] | None: ...


def dola_contrasts(tokenizer: Any, output: _Recorded) -> list[DolaRecord | None] | None:
    """Per token, the layer DoLa contrasted and whether that changed the final layer's own choice."""
    if not output.token_info:
        return None
    first = output.sequences[0] if output.sequences else []
    records: list[DolaRecord | None] = []
    for token, known in zip(first, output.token_info, strict=False):
        contrast = known.get("dola")
        records.append(None if contrast is None else {
            "layer": contrast["layer"], "layers": list(contrast["layers"]),
            "js": [round(value, 6) for value in contrast["js"]], "greedy_id": contrast["final_top"],
            "greedy_text": tokenizer.decode([contrast["final_top"]]), "changed": contrast["final_top"] != token})
    return records

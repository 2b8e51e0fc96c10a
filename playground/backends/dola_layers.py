"""DoLa's candidate premature layers as transformers 4.52 read `dola_layers`, for both backends' DoLa loops, and the
name their records give the contrast."""

from __future__ import annotations

from typing import Any

# DoLa's contrast among a token's stages: the first, ahead of the logits chain, on both backends. The model's own
# probabilities are the final layer's; this stage turns them into the contrast the chain starts from.
CONTRAST_STAGE = "dola"


def requested(value: str) -> str | list[int]:
    """The RunSpec's `dola_layers` ("low", "high" or comma-separated indices) as 4.52's generate() took it."""
    value = value.strip()
    return value if value in ("low", "high") else [int(i) for i in value.split(",")]


def candidate_layers(model: Any, dola_layers: str | list[int] | None) -> list[int]:
    """4.52's reading of `dola_layers`: 'low' / 'high' halves of the layers in steps of 2, or a list of indices."""
    final = model.config.get_text_config().num_hidden_layers
    if not model.config.tie_word_embeddings:  # tied: layer 0 through lm_head would be an identity map
        start = 0
    else:
        start = 2 if final > 2 else 1 if final == 2 else 0
    layers = []
    if dola_layers == "low":
        if start == final // 2:
            return [start]
        layers = list(range(start, final // 2, 2)) if final <= 40 else list(range(start, 20, 2))
    elif dola_layers == "high":
        layers = list(range(final // 2, final, 2)) if final <= 40 else list(range(final - 20, final, 2))
    if layers:
        return layers
    if dola_layers in ("low", "high"):  # a model too shallow for the half asked for: 4.52 crashed on it
        raise ValueError(f"dola_layers={dola_layers!r} leaves no candidate layer in a {final}-layer model; "
                         "name the layers instead, e.g. 0")
    if isinstance(dola_layers, list) and all(isinstance(i, int) and i >= 0 for i in dola_layers):
        if layers := [i for i in dola_layers if i < final]:
            return layers
    raise ValueError(f"DoLa needs dola_layers 'low', 'high' or a list of layer indices in [0, {final}), "
                     f"got {dola_layers!r}")

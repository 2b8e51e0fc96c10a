"""The PyTorch path's side of the prefix store: which runs may start from a kept cache, the snapshot of a finished
run's cache, and its restore into the next run's fresh cache.

A snapshot is each layer's keys and values of the first row, cut to the positions the run filled (a copy, as in
transformers' prefix-reuse recipe: `generate` writes into the cache it is given, so an entry handed over as it is
would be overwritten by the next run). A restore writes the first `shared` positions into the new run's own cache
through each layer's `update`, as a prefill would: a dynamic layer concatenates, a static one writes at its counter,
a bf16 store rounds nothing again (the snapshot is already bf16). `generate` then sees a cache holding `shared`
tokens and runs only the prompt's remaining ids through the model; keys and values at a position depend only on the
ids up to it, so the tokens are the cold run's.

The quantized, sliding and sink caches cannot be rebuilt from keys and values alone: they are kept whole and
restored as they were left (restored_reuse.py), and their warm runs are measured against the cold run
(reuse_vs_cold.py). `continue_from` and `keep` pick the way by the cache.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Cache

from playground.backends.base import GenerationOutput
from playground.backends.prefix_store import RESTORED_CACHES, Kept, Match, ReusePlan, cold_reason
from playground.backends.torch import restored_reuse
from playground.backends.torch.reuse_vs_cold import against_cold
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


def refusal(spec: RunSpec, model: Any) -> str | None:
    """Why this run cannot start from (or leave) a kept cache, in one line; None when it can."""
    reason = cold_reason(spec.strategy, spec.cache, spec.torch_compile, assistant=spec.assistant)
    if reason is not None or spec.cache in RESTORED_CACHES:
        return reason
    types = getattr(model.config.get_text_config(decoder=True), "layer_types", None) or ()
    if any(kind != "full_attention" for kind in types):
        return f"{spec.model}'s sliding layers keep only their window, so a kept cache could not be cropped"
    return None


def continue_from(spec: RunSpec, match: Match | None, cache: Cache, rows: int) -> tuple[int, str | None]:
    """Start the run's fresh `cache` from the entry (None: a cold run): the positions restored, and the reason
    where it could not be (the run is then cold)."""
    if match is None:
        return 0, None
    if spec.cache not in RESTORED_CACHES:
        return restore(match, cache, rows), None
    reason = restored_reuse.restore(match, cache)
    return (0, reason) if reason is not None else (match.shared, None)


def keep(spec: RunSpec, cache: Cache, prompt: list[int], first: list[int]) -> Kept | None:
    """The run's cache for the store, taken as its cache type is restored."""
    if spec.cache in RESTORED_CACHES:
        return restored_reuse.snapshot(cache, prompt, first)
    return snapshot(cache, prompt, first)


def hand_back(output: GenerationOutput, loaded: LoadedModel, spec: RunSpec, reuse: ReusePlan | None, cache: Cache,
              prompt: torch.Tensor, note: str | None) -> None:
    """After the run: its cache for the store where asked, why its match could not be restored, and a warm run of a
    restored cache measured against the cold run (outside the run's timings)."""
    output.reuse_note = note
    if reuse is None:
        return
    if reuse.keep:
        output.kept = keep(spec, cache, prompt[0].tolist(), output.sequences[0])
    if output.reused_tokens and reuse.warm is not None:
        output.vs_cold = vs_cold(loaded, spec, reuse.warm, cache, prompt, output.sequences[0])


def vs_cold(loaded: LoadedModel, spec: RunSpec, match: Match, cache: Cache, prompt: torch.Tensor,
            tokens: list[int]) -> dict[str, Any] | None:
    """A warm run of a restored cache against the cold run of its tokens (reuse_vs_cold.py); None for the exact
    caches, which are not measured."""
    if spec.cache not in RESTORED_CACHES:
        return None
    return against_cold(loaded, spec, restored_reuse.restored(match, cache), prompt, match.shared, tokens)


def restore(match: Match, cache: Cache, rows: int) -> int:
    """Write the entry's first `match.shared` positions into the run's fresh `cache`, repeated for `rows` rows (beam
    search's hypotheses all start from the prompt); the positions restored."""
    shared = match.shared
    layers: list[tuple[torch.Tensor, torch.Tensor]] = match.entry.snapshot
    for index, (keys, values) in enumerate(layers):  # (1, kv_heads, length, head_dim) each
        cache.update(_rows(keys[:, :, :shared], rows), _rows(values[:, :, :shared], rows), index)
    return shared


def snapshot(cache: Cache, prompt: list[int], first: list[int]) -> Kept | None:
    """A copy of the first row's filled positions, with the ids they hold: the prompt and, where the cache has one
    row, the new tokens `first` (beam search's rows share only the prompt's positions); None where it holds
    nothing."""
    ids = prompt + first if _states(cache.layers[0])[0].shape[0] == 1 else prompt
    held = min(int(cache.get_seq_length()), len(ids))
    if held <= 0:
        return None
    layers = []
    nbytes = 0
    for layer in cache.layers:
        stored_keys, stored_values = _states(layer)  # (rows, kv_heads, length, head_dim) each
        keys = stored_keys[:1, :, :held].clone()  # a copy: the next run writes into its own cache
        values = stored_values[:1, :, :held].clone()
        layers.append((keys, values))
        nbytes += keys.numel() * keys.element_size() + values.numel() * values.element_size()
    return Kept(tuple(ids[:held]), layers, nbytes)


def _states(layer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A full-precision layer's stored keys and values (the only layers `refusal` lets through)."""
    return layer.keys, layer.values


def _rows(states: torch.Tensor, rows: int) -> torch.Tensor:
    return states if rows == 1 else states.repeat_interleave(rows, dim=0)

"""Beam search as a tree: every candidate transformers' beam search weighed at each step, where it came from,
its cumulative log-probability, and whether it was kept, pruned or finished.

transformers 5.x runs beam search through two small methods per step: `_get_top_k_continuations` picks the
2K best continuations over all beams, `_get_running_beams_for_next_iteration` keeps the K best of those that
did not finish. Both are wrapped on the model instance for one generate() call, so the record is what the
library itself decided, not a re-implementation of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch
from transformers import GenerationConfig

from playground import registry
from playground.backends.base import PreviewTokens
from playground.backends.beam_nodes import BeamTree
from playground.backends.torch import config as settings
from playground.backends.torch.strategy import Call, Generate, Recorded
from playground.backends.torch.transformers_hooks import wrap_beam_steps
from playground.spec import RunSpec


class BeamRecorder(BeamTree):
    """Collects each step's candidates from the library's own calls; `tree(best)` marks the returned path.
    `preview` hears the leading running beam's new tokens after each step (topk ranks the kept beams best first)."""

    def __init__(self, preview: PreviewTokens | None = None) -> None:
        super().__init__()
        self.preview = preview

    def candidates(self, out: tuple[torch.Tensor, ...], position: int, step: int) -> None:
        """After _get_top_k_continuations returned (scores (1, 2K), sequences (1, 2K, L), beam indices (1, 2K, S)):
        each candidate's token is in its sequence at `position`, its beam in the beam indices at `step`."""
        scores, sequences, beams = out
        # batch 1: no batch offset in the beam indices
        self.add_step(scores[0].tolist(), sequences[0, :, position].tolist(), beams[0, :, step].tolist())

    def selection(self, topk_log_probs: torch.Tensor, hits: torch.Tensor, num_beams: int) -> None:
        """At _get_running_beams_for_next_iteration: which candidates finished, and which K continue."""
        running = topk_log_probs + hits.to(torch.float32) * -1.0e9  # as the library ranks them
        self.select(hits[0].tolist(), torch.topk(running, k=num_beams)[1][0].tolist())
        if self.preview is not None:
            self.preview(self.leading())


@contextmanager
def recording_beams(model: Any, recorder: BeamRecorder) -> Iterator[None]:
    """The two beam-search steps of this model instance wrapped for one generate() call."""
    def top_k_continuations(top_k: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            out = top_k(*args, **kwargs)
            recorder.candidates(out, kwargs["cur_len"], kwargs["cur_len"] - kwargs["decoder_prompt_len"])
            return out
        return call

    def running_beams(keep: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            recorder.selection(kwargs["topk_log_probs"], kwargs["next_token_hits_stopping_criteria"],
                               kwargs["num_beams"])
            return keep(*args, **kwargs)
        return call

    with wrap_beam_steps(model, top_k_continuations, running_beams):
        yield


class BeamSearch(Generate):
    """Beam search and beam sampling, as generate() runs them, recorded as a tree. Nothing streams (transformers
    refuses a streamer: no hypothesis is final until the search ends); the leading beam goes to `preview`."""

    streams = False
    probes = False  # several hypotheses per step: no one distribution per token

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec)
        self.samples = registry.strategy(spec.strategy).samples(spec.assisted_sampling)
        self.recorder: BeamRecorder | None = None

    def configure(self, config: GenerationConfig) -> None:
        settings.beam_search(self.spec, config)

    def min_tokens_to_keep(self, eos: tuple[int, ...]) -> int:
        """Beam sampling keeps one more token than there are end tokens in each filter, as transformers' own list
        does, so a hypothesis can always go on."""
        return len(eos) + 1 if self.samples and eos else 1

    def recording(self, call: Call) -> AbstractContextManager[None]:
        self.recorder = BeamRecorder(call.preview)
        return recording_beams(call.loaded.model, self.recorder)

    def recorded(self, call: Call, first: list[int]) -> Recorded:
        return Recorded(beam_tree=self.recorder.tree(first) if self.recorder else None)

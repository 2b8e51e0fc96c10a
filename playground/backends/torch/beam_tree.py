"""Beam search as a tree: every candidate transformers' beam search weighed at each step, where it came from,
its cumulative log-probability, and whether it was kept, pruned or finished.

transformers 5.x runs beam search through two small methods per step: `_get_top_k_continuations` picks the
2K best continuations over all beams, `_get_running_beams_for_next_iteration` keeps the K best of those that
did not finish. Both are wrapped on the model instance for one generate() call, so the record is what the
library itself decided, not a re-implementation of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from playground.backends.base import BeamNode


class BeamRecorder:
    """Collects each step's candidates; `tree(best)` marks the returned sequence's path."""

    def __init__(self) -> None:
        self.steps: list[list[BeamNode]] = []
        self._live: list[int] = []  # node index (in the last step) of each running beam, in beam order

    def candidates(self, out: tuple[torch.Tensor, ...], position: int, step: int) -> None:
        """After _get_top_k_continuations returned (scores (1, 2K), sequences (1, 2K, L), beam indices (1, 2K, S)):
        each candidate's token is in its sequence at `position`, its beam in the beam indices at `step`."""
        scores, sequences, beams = out
        nodes: list[BeamNode] = []
        for k, score in enumerate(scores[0].tolist()):
            beam = int(beams[0, k, step])  # batch 1: no batch offset
            nodes.append({"parent": self._live[beam] if self._live else None, "token": int(sequences[0, k, position]),
                          "score": float(score), "kept": False, "finished": False, "chosen": False})
        self.steps.append(nodes)

    def selection(self, topk_log_probs: torch.Tensor, hits: torch.Tensor, num_beams: int) -> None:
        """At _get_running_beams_for_next_iteration: which candidates finished, and which K continue."""
        nodes = self.steps[-1]
        finished = hits[0].tolist()
        running = topk_log_probs + hits.to(torch.float32) * -1.0e9  # as the library ranks them
        kept = torch.topk(running, k=num_beams)[1][0].tolist()
        for node, done in zip(nodes, finished, strict=True):
            node["finished"] = bool(done)
        for k in kept:
            nodes[k]["kept"] = not nodes[k]["finished"]
        self._live = kept

    def tree(self, best: list[int]) -> list[list[BeamNode]]:
        """The steps, with the path of the best returned sequence (its new tokens) marked as chosen."""
        parent: int | None = None
        for step, token in zip(self.steps, best, strict=False):
            match = next((i for i, n in enumerate(step) if n["token"] == token and n["parent"] == parent), None)
            if match is None:
                break
            step[match]["chosen"] = True
            parent = match
        return self.steps


@contextmanager
def recording_beams(model: Any, recorder: BeamRecorder | None) -> Iterator[None]:
    """The two beam-search steps of this model instance wrapped for one generate() call."""
    if recorder is None:
        yield
        return
    top_k, keep = model._get_top_k_continuations, model._get_running_beams_for_next_iteration

    def top_k_continuations(*args: Any, **kwargs: Any) -> Any:
        out = top_k(*args, **kwargs)
        recorder.candidates(out, kwargs["cur_len"], kwargs["cur_len"] - kwargs["decoder_prompt_len"])
        return out

    def running_beams(*args: Any, **kwargs: Any) -> Any:
        recorder.selection(kwargs["topk_log_probs"], kwargs["next_token_hits_stopping_criteria"], kwargs["num_beams"])
        return keep(*args, **kwargs)

    wrappers: dict[str, Callable[..., Any]] = {"_get_top_k_continuations": top_k_continuations,
                                               "_get_running_beams_for_next_iteration": running_beams}
    for name, wrapper in wrappers.items():
        setattr(model, name, wrapper)
    try:
        yield
    finally:
        for name in wrappers:
            delattr(model, name)

"""Assisted decoding step by step: what each verification step drafted and how much of it the main model accepted.

transformers builds its candidate generator inside generate() and, per step, calls its `get_candidates`
(the draft: prompt + accepted so far + drafted tokens) and then `update_candidate_strategy(input_ids, scores,
num_matches)` with the number of drafted tokens the main model accepted (after trimming at EOS and at the
length limit). Both are wrapped on the generator instance for one call, so the record is the library's own
decision, not a re-implementation of it.

Drafted tokens are always in the main model's vocabulary: with a draft model of another tokenizer (universal
assisted decoding), `get_candidates` returns the draft's text re-tokenized by the main tokenizer, and that is
what the main model verifies and what is recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from playground.backends.base import AssistStep
from playground.backends.torch.probes import TokenProbe
from playground.backends.torch.transformers_hooks import wrap_candidate_generator


class AssistRecorder:
    """Collects one {drafted, accepted} record per verification step, and tells the token probe (if any) where
    each verification pass starts and what it kept."""

    def __init__(self, probe: TokenProbe | None = None, draft_room: Callable[[], int | None] | None = None) -> None:
        self.steps: list[AssistStep] = []
        self.probe = probe
        self.draft_room = draft_room  # the cache's cap on the next pass's drafts (None: no cap)

    def drafted(self, input_ids: torch.Tensor, candidate_ids: torch.Tensor) -> None:
        """After get_candidates: the candidates (1, L + d) extend the sequence so far (1, L) by d drafted tokens."""
        self.steps.append({"drafted": candidate_ids[0, input_ids.shape[1]:].tolist(), "accepted": 0})

    def accepted(self, num_matches: int) -> None:
        """At update_candidate_strategy: how many of the last step's drafted tokens were kept."""
        if self.steps:
            self.steps[-1]["accepted"] = int(num_matches)

    def proposed(self) -> int:
        return sum(len(step["drafted"]) for step in self.steps)

    def acceptance_rate(self) -> float | None:
        """Accepted drafted tokens / drafted tokens; None when nothing was drafted."""
        proposed = self.proposed()
        return sum(step["accepted"] for step in self.steps) / proposed if proposed else None

    def capped(self, input_ids: torch.Tensor, candidate_ids: torch.Tensor,
               logits: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The candidates (1, L + d) and their draft logits (1, d, V) cut to the cache's draft room. A pass left
        without drafts passes no logits, so speculative sampling draws from the main model alone."""
        room = self.draft_room() if self.draft_room is not None else None
        drafted = candidate_ids.shape[1] - input_ids.shape[1]
        if room is None or drafted <= room:
            return candidate_ids, logits
        kept = candidate_ids[:, :input_ids.shape[1] + room]
        return kept, (logits[:, :room] if logits is not None and room > 0 else None)

    def watch(self, generator: Any) -> Any:
        """The generator with its two per-step methods recording into this recorder (on the instance only)."""
        get_candidates, update = generator.get_candidates, generator.update_candidate_strategy

        def recording_get(input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if self.probe is not None:
                self.probe.paused = True  # a draft model's own generate runs the main model's processor list
            try:
                candidate_ids, logits = get_candidates(input_ids, *args, **kwargs)
            finally:
                if self.probe is not None:
                    self.probe.paused = False
            candidate_ids, logits = self.capped(input_ids, candidate_ids, logits)
            self.drafted(input_ids, candidate_ids)
            if self.probe is not None:
                self.probe.begin_step()
            return candidate_ids, logits

        def recording_update(input_ids: torch.Tensor, scores: torch.Tensor, num_matches: int) -> Any:
            self.accepted(num_matches)
            if self.probe is not None:
                self.probe.end_step(int(num_matches))
            return update(input_ids, scores, num_matches)

        generator.get_candidates = recording_get
        generator.update_candidate_strategy = recording_update
        return generator


@contextmanager
def recording_assist(model: Any, recorder: AssistRecorder | None) -> Iterator[None]:
    """The candidate generator that generate() builds for this model instance is watched by `recorder`."""
    if recorder is None:
        yield
        return

    def wrap(build: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *args, **kwargs: recorder.watch(build(*args, **kwargs))

    with wrap_candidate_generator(model, wrap):
        yield

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
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

import torch
from transformers import GenerationConfig

from playground.backends.torch import config as settings
from playground.backends.torch.caches.croppable_quantized import draft_room
from playground.backends.torch.probes import TokenProbe
from playground.backends.torch.strategy import Call, Generate, Recorded, probed
from playground.backends.torch.transformers_hooks import (
    first_pass_past_cache,
    with_attention_mask,
    wrap_candidate_generator,
)
from playground.spec import RunSpec
from playground.strategy_records.assisted import AssistStep

if TYPE_CHECKING:
    from playground.backends.torch.timing import TimingStreamer


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
def recording_assist(model: Any, recorder: AssistRecorder) -> Iterator[None]:
    """The candidate generator that generate() builds for this model instance is watched by `recorder`."""
    def wrap(build: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *args, **kwargs: recorder.watch(build(*args, **kwargs))

    with wrap_candidate_generator(model, wrap):
        yield


class Assisted(Generate):
    """Assisted decoding as generate() runs it (a draft model, or prompt lookup), recorded per verification
    step: what was drafted, what the main model kept, and each kept token's distributions."""

    replays_draws = False  # speculative sampling draws per kept draft: nothing fixed to replay

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec)
        self.recorder: AssistRecorder | None = None

    def configure(self, config: GenerationConfig) -> None:
        settings.assisted(self.spec, config)

    def generate_kwargs(self, call: Call) -> dict[str, Any]:
        return settings.assistant_kwargs(self.spec, call.loaded.tokenizer, call.draft)

    @contextmanager
    def recording(self, call: Call) -> Iterator[None]:
        """The candidate generator watched; a cache that masks its own attention (the quantized one's block
        mask over what it holds) gives each verify pass its mask."""
        cache = call.cache
        self.recorder = AssistRecorder(call.probe, lambda: draft_room(cache))
        with ExitStack() as stack:
            stack.enter_context(recording_assist(call.loaded.model, self.recorder))
            if call.draft is None:  # prompt lookup: a warm run's kept prefix is not run again
                stack.enter_context(first_pass_past_cache(call.loaded.model))
            block_mask = getattr(cache, "block_mask", None)
            if block_mask is not None:
                stack.enter_context(with_attention_mask(call.loaded.model, cache, block_mask))
            yield

    def recorded(self, call: Call, first: list[int]) -> Recorded:
        """Each verify pass streams one chunk (the accepted drafts and the main model's own token): the passes
        are counted there, since a draft that is the main model itself would trip the forward hook too."""
        recorder, streamer = self.recorder, call.streamer
        assert recorder is not None, "recorded() follows recording()"
        return Recorded(
            token_info=probed(call, first),
            assisted_steps=recorder.steps,
            acceptance_rate=recorder.acceptance_rate(),
            draft_flags=_draft_flags(streamer, len(first)),
            forward_passes=len(streamer.chunk_sizes) if streamer else None,
            extra={"draft_tokens_proposed": recorder.proposed()},
        )


def _draft_flags(streamer: TimingStreamer | None, new_tokens: int) -> list[bool] | None:
    """Whether each token was an accepted draft; a streamed chunk is the accepted drafts plus the main model's
    own token."""
    if streamer is None:
        return None
    return [i < size - 1 for size in streamer.chunk_sizes for i in range(size)][:new_tokens]

"""PyTorch path: transformers' model.generate with a timing streamer, a stop criterion and our cache object."""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from playground import caches, strategies
from playground.catalog import LoadedModel
from playground.events import EmitTokens, GenerationOutput, ShouldStop
from playground.spec import RunSpec

# One generate at a time per process: torch's global RNG makes seeds reproducible only if runs do not
# interleave, and on 2 cores two concurrent runs would only slow each other and falsify both timings.
GENERATE_LOCK = threading.Lock()


class TimingStreamer(BaseStreamer):
    """Records when each new token reaches the host and forwards it; the first put() is the prompt."""

    def __init__(self, emit: EmitTokens) -> None:
        self.emit = emit
        self.token_times: list[float] = []
        self._seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        now = time.perf_counter()
        if not self._seen_prompt:
            self._seen_prompt = True
            return
        ids = value.reshape(-1).tolist()  # (1,) per step for batch 1
        self.token_times.extend([now] * len(ids))
        self.emit(ids)

    def end(self) -> None:
        pass


class StopWhen(StoppingCriteria):
    """Ends generation at the next step once `should_stop` says so (the UI's stop, a time limit)."""

    def __init__(self, should_stop: ShouldStop) -> None:
        self.should_stop = should_stop
        self.triggered = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        self.triggered = self.triggered or bool(self.should_stop())
        return torch.full((input_ids.shape[0],), self.triggered, dtype=torch.bool, device=input_ids.device)


def streams(spec: RunSpec) -> bool:
    """transformers refuses a streamer with beam search (several hypotheses, none final until the end)."""
    return spec.strategy != "beam"


def generate(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
             should_stop: ShouldStop) -> GenerationOutput:
    model = loaded.model
    prompt_len = input_ids.shape[1]
    config = strategies.generation_config(spec, model)
    cache = caches.make_cache(spec, model, prompt_len)
    streamer = TimingStreamer(emit) if streams(spec) else None
    stop = StopWhen(should_stop)
    with GENERATE_LOCK, torch.inference_mode():
        torch.manual_seed(spec.seed)
        start = time.perf_counter()
        out = model.generate(
            input_ids,  # (1, T)
            attention_mask=torch.ones_like(input_ids),
            generation_config=config,
            past_key_values=cache,
            streamer=streamer,
            stopping_criteria=StoppingCriteriaList([stop]),
        )
        end = time.perf_counter()
    sequences = [_trim(row.tolist(), config) for row in out.sequences[:, prompt_len:]]  # (N, new)
    token_times = streamer.token_times if streamer else []
    if not streamer:
        emit(sequences[0])
    scores = out.sequences_scores.tolist() if getattr(out, "sequences_scores", None) is not None else None
    return GenerationOutput(
        sequences=sequences,
        start_time=start,
        token_times=token_times[: len(sequences[0])],
        kv_cache_bytes=caches.kv_bytes(cache),
        scores=scores,
        stopped=stop.triggered,
        extra={"generate_s": end - start},
    )


def _trim(ids: list[int], config: Any) -> list[int]:
    """Drop the padding transformers adds after EOS to shorter sequences (beam search returns a batch)."""
    eos = config.eos_token_id
    eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
    for i, token in enumerate(ids):
        if token in eos_ids:
            return ids[: i + 1]
    return ids

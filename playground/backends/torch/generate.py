"""PyTorch path: transformers' model.generate with a timing streamer, a stop criterion and our cache object."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from playground.backends.torch.config import assistant_kwargs, generation_config
from playground.backends.torch.probes import CacheTrace, TokenProbe
from playground.events import EmitTokens, GenerationOutput, ShouldStop
from playground.kv.factory import kv_bytes, make_cache
from playground.models.catalog import LoadedModel
from playground.spec import RunSpec

# One generate at a time per process: torch's global RNG makes seeds reproducible only if runs do not
# interleave, and on 2 cores two concurrent runs would only slow each other and falsify both timings.
GENERATE_LOCK = threading.Lock()


class TimingStreamer(BaseStreamer):
    """Records when each new token reaches the host and forwards it; the first put() is the prompt."""

    def __init__(self, emit: EmitTokens) -> None:
        self.emit = emit
        self.token_times: list[float] = []
        self.chunk_sizes: list[int] = []  # assisted generation puts accepted drafts + 1 per main forward
        self._seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        now = time.perf_counter()
        if not self._seen_prompt:
            self._seen_prompt = True
            return
        ids = value.reshape(-1).tolist()  # (1,) per step for batch 1
        self.token_times.extend([now] * len(ids))
        self.chunk_sizes.append(len(ids))
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


@contextmanager
def count_forward_passes(module: torch.nn.Module) -> Iterator[list[int]]:
    """Counts calls of the main model's forward (the draft model is another module, so it is not counted)."""
    count = [0]
    handle = module.register_forward_pre_hook(lambda *_: count.__setitem__(0, count[0] + 1))
    try:
        yield count
    finally:
        handle.remove()


@contextmanager
def count_draft_tokens(model: Any) -> Iterator[list[int]]:
    """Counts the draft tokens assisted generation proposes to the main model.

    transformers builds its candidate generator inside generate(); we wrap the factory on this instance for
    the duration of one call (GENERATE_LOCK is held) and count each proposal's length at the source.
    """
    proposed = [0]
    build = model._get_candidate_generator

    def counting_build(*args: Any, **kwargs: Any) -> Any:
        generator = build(*args, **kwargs)
        get_candidates = generator.get_candidates

        def counting_get(input_ids: torch.Tensor, *a: Any, **k: Any) -> Any:
            candidate_ids, logits = get_candidates(input_ids, *a, **k)
            proposed[0] += candidate_ids.shape[1] - input_ids.shape[1]
            return candidate_ids, logits

        generator.get_candidates = counting_get
        return generator

    model._get_candidate_generator = counting_build
    try:
        yield proposed
    finally:
        del model._get_candidate_generator  # back to the class's method


def streams(spec: RunSpec) -> bool:
    """transformers refuses a streamer with beam search (several hypotheses, none final until the end)."""
    return spec.strategy != "beam"


def generate(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
             should_stop: ShouldStop) -> GenerationOutput:
    model = loaded.model
    prompt_len = input_ids.shape[1]
    config = generation_config(spec, model)
    assistant = assistant_kwargs(spec, loaded.tokenizer)
    cache = make_cache(spec, model, prompt_len)
    streamer = TimingStreamer(emit) if streams(spec) else None
    stop = StopWhen(should_stop)
    trace = CacheTrace(cache)
    # one distribution per token only exists for single-hypothesis, one-token-per-step decoding
    probe = TokenProbe() if spec.strategy in ("greedy", "sampling") else None
    with GENERATE_LOCK, torch.inference_mode(), count_forward_passes(model) as passes, \
            count_draft_tokens(model) as proposed:
        torch.manual_seed(spec.seed)
        start = time.perf_counter()
        out = model.generate(
            input_ids,  # (1, T)
            attention_mask=torch.ones_like(input_ids),
            generation_config=config,
            past_key_values=cache,
            streamer=streamer,
            stopping_criteria=StoppingCriteriaList([stop, trace]),
            logits_processor=LogitsProcessorList([probe] if probe else []),
            **assistant,
        )
        end = time.perf_counter()
    sequences = [_trim(row.tolist(), config) for row in out.sequences[:, prompt_len:]]  # (N, new)
    token_times = streamer.token_times if streamer else []
    if not streamer:
        emit(sequences[0])
    scores = out.sequences_scores.tolist() if getattr(out, "sequences_scores", None) is not None else None
    acceptance, drafts = None, None
    if spec.strategy == "assisted" and streamer:
        drafts = [i < size - 1 for size in streamer.chunk_sizes for i in range(size)][: len(sequences[0])]
    if spec.strategy == "assisted" and proposed[0]:
        # each main forward verifies one proposal and adds its accepted drafts plus one token of its own
        accepted = len(sequences[0]) - passes[0]
        acceptance = max(0, accepted) / proposed[0]
    return GenerationOutput(
        sequences=sequences,
        start_time=start,
        token_times=token_times[: len(sequences[0])],
        kv_cache_bytes=kv_bytes(cache),
        scores=scores,
        acceptance_rate=acceptance,
        token_info=probe.finish(sequences[0][-1] if sequences[0] else None)[: len(sequences[0])] if probe else None,
        draft_flags=drafts,
        kv_trace=trace.bytes,
        forward_passes=passes[0],
        stopped=stop.triggered,
        extra={"generate_s": end - start, "draft_tokens_proposed": proposed[0] if spec.strategy == "assisted"
               else None},
    )


def _trim(ids: list[int], config: Any) -> list[int]:
    """Drop the padding transformers adds after EOS to shorter sequences (beam search returns a batch)."""
    eos = config.eos_token_id
    eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
    for i, token in enumerate(ids):
        if token in eos_ids:
            return ids[: i + 1]
    return ids

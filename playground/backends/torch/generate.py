"""PyTorch path: transformers' model.generate with a timing streamer, a stop criterion and our cache object."""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList
from transformers.cache_utils import Cache
from transformers.generation.streamers import BaseStreamer

from playground import registry
from playground.backends.base import (
    BeamNode,
    EmitTokens,
    GenerationOutput,
    PreviewTokens,
    ShouldStop,
    TokenInfo,
    eos_ids,
)
from playground.backends.group_tree import group_tree
from playground.backends.torch.assist_steps import AssistRecorder, recording_assist
from playground.backends.torch.beam_tree import BeamRecorder, recording_beams
from playground.backends.torch.caches.croppable_quantized import draft_room
from playground.backends.torch.caches.factory import kv_bytes, make_cache
from playground.backends.torch.chain import TorchContext
from playground.backends.torch.config import assistant_kwargs, generation_config
from playground.backends.torch.probes import CacheTrace, TokenProbe, chained, count_forward_passes
from playground.backends.torch.transformers_hooks import with_attention_mask
from playground.constraints.matching import accepting
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


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
        # torch's stubs type every factory's result as Tensor; a bool tensor is what StoppingCriteria returns
        stop = torch.full((input_ids.shape[0],), self.triggered, dtype=torch.bool, device=input_ids.device)
        return cast(torch.BoolTensor, stop)


def streams(spec: RunSpec) -> bool:
    """transformers refuses a streamer with beam search (several hypotheses, none final until the end)."""
    return registry.strategy(spec.strategy).records != "beams"


def generate(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
             should_stop: ShouldStop, draft: LoadedModel | None = None,
             preview: PreviewTokens | None = None) -> GenerationOutput:
    """model.generate with our cache, streamer, probes and stop criterion; new tokens stream through `emit`,
    beam search's leading beam through `preview`."""
    input_ids = input_ids.to(loaded.model.device)  # the runner encodes on the host
    prompt_len = input_ids.shape[1]
    run = _prepare(loaded, prompt_len, spec, emit, should_stop, draft, preview)
    eos = tuple(eos_ids(run.config, loaded.tokenizer))
    strategy = registry.strategy(spec.strategy)
    # beam sampling keeps one more token than there are end tokens in each filter, as transformers' own list does
    keep = len(eos) + 1 if strategy.records == "beams" and strategy.samples(spec.assisted_sampling) and eos else 1
    context = TorchContext(prompt_len, eos, loaded.tokenizer, input_ids.device, min_tokens_to_keep=keep)
    out, measured = _call_generate(loaded.model, input_ids, spec, run, context)
    sequences = [_trim(row.tolist(), run.config) for row in out.sequences[:, prompt_len:]]  # (N, new)
    if not run.streamer:
        emit(sequences[0])  # nothing streamed (beam search): the best sequence arrives whole
    output = _output(spec, run, out, sequences, measured)
    if spec.constraint != "none":
        vocab = _vocab_size(loaded.model)
        output.constraint_accepting = [accepting(loaded.tokenizer, vocab, context.eos, spec.constraint,
                                                 spec.constraint_text, spec.prefix_ids, ids) for ids in sequences]
        output.extra["logits_width"] = vocab  # the constraint's allowed-token counts are out of this many
    return output


def _vocab_size(model: Any) -> int:
    """The width of the model's logits: the constraint's index of the vocabulary is built for it."""
    return int(model.get_output_embeddings().weight.shape[0])


@dataclass
class _Run:
    """What rides along one model.generate call besides the prompt."""

    config: GenerationConfig
    assistant: dict[str, Any]  # assisted decoding's generate() arguments; empty otherwise
    cache: Cache
    streamer: TimingStreamer | None
    stop: StopWhen
    trace: CacheTrace
    probe: TokenProbe | None
    beams: BeamRecorder | None
    assist: AssistRecorder | None
    # a strategy's own loop (`custom_generate`): what it recorded per token and row (contrastive search's
    # candidates, DoLa's contrast), each with a `token_info()`; None for generate's own loops
    steps: list[Any] | None


@dataclass
class _Measured:
    """What one model.generate call measured besides its output."""

    start: float
    end: float
    forward_passes: int  # of the main model


def _prepare(loaded: LoadedModel, prompt_len: int, spec: RunSpec, emit: EmitTokens, should_stop: ShouldStop,
             draft: LoadedModel | None, preview: PreviewTokens | None = None) -> _Run:
    """The generation config, assistant arguments, cache, streamer, stop criterion and probes of one request."""
    config = generation_config(spec, loaded.model)
    assistant = assistant_kwargs(spec, loaded.tokenizer, draft)
    cache = make_cache(spec, loaded.model, prompt_len)
    records = registry.strategy(spec.strategy).records
    own_loop = registry.strategy(spec.strategy).torch_loop is not None
    # one distribution per token exists for single-hypothesis decoding; assisted passes are sorted out per step
    probe = TokenProbe() if records in ("tokens", "drafts") else None
    return _Run(
        config=config,
        assistant=assistant,
        cache=cache,
        streamer=TimingStreamer(emit) if streams(spec) else None,
        stop=StopWhen(should_stop),
        trace=CacheTrace(cache),
        probe=probe,
        # generate()'s own beam search is recorded from inside transformers; a loop of ours records its own steps
        beams=BeamRecorder(preview) if records == "beams" and not own_loop else None,
        assist=AssistRecorder(probe, lambda: draft_room(cache)) if records == "drafts" else None,
        steps=[] if own_loop else None,
    )


def _call_generate(model: Any, input_ids: torch.Tensor, spec: RunSpec, run: _Run,
                   context: TorchContext) -> tuple[Any, _Measured]:
    """model.generate, seeded and timed, counting main-model forward passes."""
    block_mask = getattr(run.cache, "block_mask", None) if run.assist is not None else None
    with torch.inference_mode(), count_forward_passes(model) as passes, recording_assist(model, run.assist), \
            chained(model, spec, context, run.probe), recording_beams(model, run.beams), \
            (with_attention_mask(model, run.cache, block_mask) if block_mask else nullcontext()), \
            (_quiet_validation() if registry.strategy(spec.strategy).torch_loop else nullcontext()):
        torch.manual_seed(spec.seed)
        start = time.perf_counter()
        out = model.generate(
            input_ids,  # (1, T)
            attention_mask=torch.ones_like(input_ids),
            generation_config=run.config,
            past_key_values=run.cache,
            streamer=run.streamer,
            stopping_criteria=StoppingCriteriaList([run.stop, run.trace]),
            **run.assistant,
            **_own_loop(spec, run),
        )
        end = time.perf_counter()
    return out, _Measured(start, end, passes[0])


@contextmanager
def _quiet_validation() -> Iterator[None]:
    """generate() validates its config again and logs a warning that settings only our loop reads (contrastive
    search's top_k) "may be ignored": transformers 5 no longer runs the method, and the loop does read them."""
    logger = logging.getLogger("transformers.generation.configuration_utils")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _own_loop(spec: RunSpec, run: _Run) -> dict[str, Any]:
    """generate()'s arguments for a strategy that runs its own decoding loop (`custom_generate`): generate()
    puts the prompt in the streamer but hands the loop none, so the loop's `emit` feeds the same streamer."""
    where = registry.strategy(spec.strategy).torch_loop
    if where is None:
        return {}
    module, name = where.split(":")
    loop = getattr(importlib.import_module(module), name)
    streamer = run.streamer
    if streamer is None:
        return {"custom_generate": loop, "record": run.steps}
    return {"custom_generate": loop, "record": run.steps, "emit": lambda ids: streamer.put(torch.tensor(ids))}


def _output(spec: RunSpec, run: _Run, out: Any, sequences: list[list[int]], measured: _Measured) -> GenerationOutput:
    """The backends' common output: tokens and their times, cache bytes, and what the probes recorded."""
    first = sequences[0]
    token_times = run.streamer.token_times if run.streamer else []
    assisted = run.assist is not None
    # each main verification pass streams one chunk; counted there, since a draft that is the main model itself
    # would trip the forward hook too
    passes = len(run.streamer.chunk_sizes) if assisted and run.streamer else measured.forward_passes
    return GenerationOutput(
        sequences=sequences,
        start_time=measured.start,
        token_times=token_times[: len(first)],
        kv_cache_bytes=kv_bytes(run.cache),
        scores=_beam_scores(out),
        acceptance_rate=run.assist.acceptance_rate() if run.assist else None,
        token_info=_token_info(run, first),
        draft_flags=_draft_flags(run.streamer, len(first)) if assisted else None,
        kv_trace=run.trace.bytes,
        beam_tree=_beam_tree(spec, run, first),
        assisted_steps=run.assist.steps if run.assist else None,
        forward_passes=passes,
        stopped=run.stop.triggered,
        extra={"generate_s": measured.end - measured.start,
               "draft_tokens_proposed": run.assist.proposed() if run.assist else None},
    )


def _token_info(run: _Run, first: list[int]) -> list[TokenInfo] | None:
    """Per token of the first sequence: what the probes saw, and what a strategy's own loop recorded (row 0)."""
    if run.probe is None:
        return None
    info = run.probe.finish(first[-1] if first else None)[: len(first)]
    own = [step for step in run.steps or [] if step.row == 0]
    for known, step in zip(info, own, strict=False):
        known.update(step.token_info())
    return info


def _beam_tree(spec: RunSpec, run: _Run, first: list[int]) -> list[list[BeamNode]] | None:
    """What a beam-type strategy weighed per step, the best sequence's path marked; None for the others."""
    if run.beams is not None:
        return run.beams.tree(first)
    if run.steps is not None and registry.strategy(spec.strategy).records == "beams":
        return group_tree(run.steps).tree(first)
    return None


def _beam_scores(out: Any) -> list[float] | None:
    """Beam search's score of each returned sequence; None for the other strategies."""
    scores = getattr(out, "sequences_scores", None)
    return scores.tolist() if scores is not None else None


def _draft_flags(streamer: TimingStreamer | None, new_tokens: int) -> list[bool] | None:
    """Assisted decoding: whether each token was an accepted draft; a streamed chunk is the accepted drafts
    plus the main model's own token."""
    if streamer is None:
        return None
    return [i < size - 1 for size in streamer.chunk_sizes for i in range(size)][:new_tokens]


def _trim(ids: list[int], config: Any) -> list[int]:
    """Drop the padding transformers adds after EOS to shorter sequences (beam search returns a batch)."""
    stops = set(eos_ids(config))
    for i, token in enumerate(ids):
        if token in stops:
            return ids[: i + 1]
    return ids

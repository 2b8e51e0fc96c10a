"""PyTorch path: transformers' model.generate with a timing streamer, a stop criterion, our cache object and the
strategy's plug-in."""

from __future__ import annotations

import time
from typing import Any, cast

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from playground.backends.base import EmitTokens, GenerationOutput, PreviewTokens, ShouldStop, eos_ids
from playground.backends.prefix_store import ReusePlan
from playground.backends.torch import prefill, prefix_reuse
from playground.backends.torch.caches.factory import kv_bytes, make_cache
from playground.backends.torch.chain import TorchContext
from playground.backends.torch.config import generation_config
from playground.backends.torch.draw_replay import seed_past_forced
from playground.backends.torch.probes import CacheTrace, TokenProbe, chained, count_forward_passes
from playground.backends.torch.strategy import Call, plug_in
from playground.backends.torch.timing import TimingStreamer
from playground.constraints.matching import replay
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec
from playground.strategy_records.composite import outputs_of


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


def generate(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
             should_stop: ShouldStop, draft: LoadedModel | None = None,
             preview: PreviewTokens | None = None, reuse: ReusePlan | None = None) -> GenerationOutput:
    """model.generate with our cache, streamer, probes and stop criterion, and the strategy's plug-in
    (strategy.py) choosing the loop and recording what it weighed; new tokens stream through `emit`, a beam-type
    search's leading beam through `preview`. `reuse`: start from a kept cache, and hand this run's back."""
    input_ids = input_ids.to(loaded.model.device)  # the runner encodes on the host
    prompt_len = input_ids.shape[1]
    plugin = plug_in(spec)
    config = generation_config(spec, loaded.model, plugin)
    warm = reuse.warm if reuse is not None else None
    # a long prompt in chunks where exact; not after a restore (generate's chunks start at position 0)
    config.prefill_chunk_size = prefill.chunk_size(spec, prompt_len) if warm is None else None
    cache = make_cache(spec, loaded.model, prompt_len)
    call = Call(loaded=loaded, spec=spec, cache=cache, streamer=TimingStreamer(emit) if plugin.streams else None,
                probe=TokenProbe() if plugin.probes else None, draft=draft, preview=preview)
    eos = tuple(eos_ids(config, loaded.tokenizer))
    context = TorchContext(prompt_len, eos, loaded.tokenizer, input_ids.device,
                           min_tokens_to_keep=plugin.min_tokens_to_keep(eos), forced=len(spec.prefix_ids))
    stop, trace = StopWhen(should_stop), CacheTrace(cache)
    with torch.inference_mode(), count_forward_passes(loaded.model) as passes, plugin.recording(call), \
            chained(loaded.model, spec, context, call.probe):
        seed_past_forced(spec, config, plugin.replays_draws, _vocab_size(loaded.model))
        start = time.perf_counter()
        reused, reuse_note = prefix_reuse.continue_from(spec, warm, cache, config.num_beams or 1)  # timed
        out = loaded.model.generate(
            input_ids,  # (1, T)
            attention_mask=torch.ones_like(input_ids),
            generation_config=config,
            past_key_values=cache,
            streamer=call.streamer,
            stopping_criteria=StoppingCriteriaList([stop, trace]),
            **plugin.generate_kwargs(call),
        )
        end = time.perf_counter()
    sequences = [_trim(row.tolist(), config) for row in out.sequences[:, prompt_len:]]  # (N, new)
    if call.streamer is None:
        emit(sequences[0])  # nothing streamed (beam search): the best sequence arrives whole
    recorded = plugin.recorded(call, sequences[0])
    output = GenerationOutput(
        sequences=sequences,
        start_time=start,
        token_times=call.streamer.token_times[: len(sequences[0])] if call.streamer else [],
        kv_cache_bytes=kv_bytes(cache),
        scores=_beam_scores(out),
        token_info=recorded.token_info,
        kv_trace=trace.bytes,
        **outputs_of(recorded),
        forward_passes=passes[0] if recorded.forward_passes is None else recorded.forward_passes,
        stopped=stop.triggered,
        extra={"generate_s": end - start, **recorded.extra},
        reused_tokens=reused,
    )
    prefix_reuse.hand_back(output, loaded, spec, reuse, cache, input_ids, reuse_note)
    if spec.constraint != "none":
        _replay_constraint(output, loaded, spec, context.eos)
    return output


def _replay_constraint(output: GenerationOutput, loaded: LoadedModel, spec: RunSpec, eos: tuple[int, ...]) -> None:
    """The grammar engine's replay of each returned sequence, for the Result's constraint record."""
    vocab = _vocab_size(loaded.model)
    output.constraint_replay = [replay(loaded.tokenizer, vocab, eos, spec.constraint, spec.constraint_text,
                                       spec.prefix_ids, ids) for ids in output.sequences]
    output.extra["logits_width"] = vocab  # the constraint's allowed-token counts are out of this many


def _vocab_size(model: Any) -> int:
    """The width of the model's logits: the constraint's index of the vocabulary is built for it."""
    return int(model.get_output_embeddings().weight.shape[0])


def _beam_scores(out: Any) -> list[float] | None:
    """Beam search's score of each returned sequence; None for the other strategies."""
    scores = getattr(out, "sequences_scores", None)
    return scores.tolist() if scores is not None else None


def _trim(ids: list[int], config: Any) -> list[int]:
    """Drop the padding transformers adds after EOS to shorter sequences (beam search returns a batch)."""
    stops = set(eos_ids(config))
    for i, token in enumerate(ids):
        if token in stops:
            return ids[: i + 1]
    return ids

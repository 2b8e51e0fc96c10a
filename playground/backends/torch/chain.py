"""The logits chain on PyTorch: one LogitsProcessorList, in the chain's order, that model.generate applies.

The registry's stages (playground/registry/builtin_chain.py) name their PyTorch side here: transformers' own
processor where one exists, ours (samplers.py) where none does. generate() builds what its config asks for
(nothing of the chain: config.py leaves every chain knob unset), and `chained` appends the chain, so that
the order is ours on every strategy, beam search included (transformers applies the list to log-probabilities
there) and speculative sampling's verify passes too.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from transformers import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    LogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from playground.backends.dry_breakers import breaker_ids
from playground.backends.torch.samplers import (
    DRYLogitsProcessor,
    PresenceFrequencyPenaltyLogitsProcessor,
    TopNSigmaLogitsWarper,
    XTCLogitsWarper,
)
from playground.registry import chain
from playground.spec import RunSpec


class TorchContext(NamedTuple):
    """What a stage's processor may depend on besides the spec."""

    prompt_length: int  # input_ids' length when generate() starts (the prompt and any forced prefix)
    eos: tuple[int, ...]
    tokenizer: Any
    device: torch.device
    min_tokens_to_keep: int = 1  # transformers keeps more in beam sampling (one more than the EOS ids)


def processors(spec: RunSpec, context: TorchContext) -> list[tuple[str, LogitsProcessor]]:
    """(stage name, processor) for every stage the run applies, in the chain's order."""
    return [(stage.name, stage.torch(spec, context)) for stage in chain.stages(spec)]


# -- the built-in stages' processors (named by their registry entries) -------------------------------------------

def repetition_penalty(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return RepetitionPenaltyLogitsProcessor(penalty=spec.repetition_penalty)


def presence_frequency(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return PresenceFrequencyPenaltyLogitsProcessor(spec.presence_penalty, spec.frequency_penalty,
                                                   context.prompt_length)


def no_repeat_ngram(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return NoRepeatNGramLogitsProcessor(spec.no_repeat_ngram_size)


def dry(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    breakers = breaker_ids(context.tokenizer, chain.parse_breakers(spec.dry_sequence_breakers))
    return DRYLogitsProcessor(spec.dry_multiplier, spec.dry_base, spec.dry_allowed_length, breakers)


def min_new_tokens(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return MinNewTokensLengthLogitsProcessor(context.prompt_length, spec.min_new_tokens, list(context.eos),
                                             device=str(context.device))


def temperature(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return TemperatureLogitsWarper(spec.temperature)


def top_n_sigma(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return TopNSigmaLogitsWarper(spec.top_n_sigma)


def top_k(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return TopKLogitsWarper(top_k=spec.top_k, min_tokens_to_keep=context.min_tokens_to_keep)


def top_p(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return TopPLogitsWarper(top_p=spec.top_p, min_tokens_to_keep=context.min_tokens_to_keep)


def min_p(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return MinPLogitsWarper(min_p=spec.min_p, min_tokens_to_keep=context.min_tokens_to_keep)


def xtc(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return XTCLogitsWarper(spec.xtc_threshold, spec.xtc_probability)


def typical_p(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return TypicalLogitsWarper(mass=spec.typical_p, min_tokens_to_keep=context.min_tokens_to_keep)


def epsilon_cutoff(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return EpsilonLogitsWarper(epsilon=spec.epsilon_cutoff, min_tokens_to_keep=context.min_tokens_to_keep)


def eta_cutoff(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return EtaLogitsWarper(epsilon=spec.eta_cutoff, min_tokens_to_keep=context.min_tokens_to_keep,
                           device=str(context.device))

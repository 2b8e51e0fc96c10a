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
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from playground.backends.dry_breakers import breaker_ids
from playground.backends.torch.carrying import AdaptivePLogitsWarper, MirostatV2LogitsWarper
from playground.backends.torch.samplers import (
    DRYLogitsProcessor,
    DynamicTemperatureLogitsWarper,
    KeepBestLogitsWarper,
    PLessLogitsWarper,
    PresenceFrequencyPenaltyLogitsProcessor,
    TopALogitsWarper,
    TopNSigmaLogitsWarper,
    XTCLogitsWarper,
)
from playground.registry import chain
from playground.registry.chain import parse_logit_bias
from playground.spec import RunSpec


class TorchContext(NamedTuple):
    """What a stage's processor may depend on besides the spec."""

    prompt_length: int  # input_ids' length when generate() starts (the prompt and any forced prefix)
    eos: tuple[int, ...]
    tokenizer: Any
    device: torch.device
    min_tokens_to_keep: int = 1  # transformers keeps more in beam sampling (one more than the EOS ids)
    breakers: frozenset[int] | None = None  # DRY's sequence breakers as ids (no tokenizer: the sampler lab)
    forced: int = 0  # the forced prefix's length (RunSpec.prefix_ids), the last tokens of input_ids

    @property
    def output_start(self) -> int:
        """Where the output begins in input_ids: a branch's forced tokens count as output, so that step k of a
        branch reads what step k of the run it came from read (the penalties over the output, min_new_tokens)."""
        return self.prompt_length - self.forced


def processors(spec: RunSpec, context: TorchContext) -> list[tuple[str, LogitsProcessor]]:
    """(stage name, processor) for every stage the run applies, in the chain's order."""
    return [(stage.name, stage.impl["torch"](spec, context)) for stage in chain.stages(spec)]


# -- the built-in stages' processors (named by their registry entries) -------------------------------------------

def logit_bias(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return SequenceBiasLogitsProcessor([[[token], bias] for token, bias in parse_logit_bias(spec.logit_bias)])


def repetition_penalty(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return RepetitionPenaltyLogitsProcessor(penalty=spec.repetition_penalty)


def presence_frequency(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return PresenceFrequencyPenaltyLogitsProcessor(spec.presence_penalty, spec.frequency_penalty,
                                                   context.output_start)


def no_repeat_ngram(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return NoRepeatNGramLogitsProcessor(spec.no_repeat_ngram_size)


def dry(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    breakers = context.breakers
    if breakers is None:
        breakers = breaker_ids(context.tokenizer, chain.parse_breakers(spec.dry_sequence_breakers))
    return DRYLogitsProcessor(spec.dry_multiplier, spec.dry_base, spec.dry_allowed_length, breakers)


def min_new_tokens(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return MinNewTokensLengthLogitsProcessor(context.output_start, spec.min_new_tokens, list(context.eos),
                                             device=str(context.device))


def temperature(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    # 0 reaches here only from the sampler lab (a run refuses it); transformers' warper refuses it too
    return KeepBestLogitsWarper() if spec.temperature == 0.0 else TemperatureLogitsWarper(spec.temperature)


def top_n_sigma(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return TopNSigmaLogitsWarper(spec.top_n_sigma)


def top_k(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return TopKLogitsWarper(top_k=spec.top_k, min_tokens_to_keep=context.min_tokens_to_keep)


def top_p(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return TopPLogitsWarper(top_p=spec.top_p, min_tokens_to_keep=context.min_tokens_to_keep)


def min_p(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    # above 1 (the sampler lab's range) no token passes and the best stays, as at 1; transformers refuses it
    return MinPLogitsWarper(min_p=min(spec.min_p, 1.0), min_tokens_to_keep=context.min_tokens_to_keep)


def xtc(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return XTCLogitsWarper(spec.xtc_threshold, spec.xtc_probability)


def typical_p(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return TypicalLogitsWarper(mass=spec.typical_p, min_tokens_to_keep=context.min_tokens_to_keep)


def epsilon_cutoff(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return EpsilonLogitsWarper(epsilon=spec.epsilon_cutoff, min_tokens_to_keep=context.min_tokens_to_keep)


def eta_cutoff(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return EtaLogitsWarper(epsilon=spec.eta_cutoff, min_tokens_to_keep=context.min_tokens_to_keep,
                           device=str(context.device))


def dynamic_temperature(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return DynamicTemperatureLogitsWarper(spec.temperature, spec.dynatemp_range, spec.dynatemp_exponent)


def top_a(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return TopALogitsWarper(spec.top_a, min_tokens_to_keep=context.min_tokens_to_keep)


def p_less(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return PLessLogitsWarper(spec.p_less)


def mirostat_v2(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return MirostatV2LogitsWarper(spec.mirostat_tau, spec.mirostat_eta)


def adaptive_p(spec: RunSpec, context: TorchContext) -> LogitsProcessor:
    return AdaptivePLogitsWarper(spec.adaptive_target, spec.adaptive_decay)

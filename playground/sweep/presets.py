"""Sweeps that show a known effect on the bundled models in under a minute once compiled: the page's sweep presets.

Each names its knob and values, the prompts it runs (the first `prompt_count` of a shipped set), the base
settings (RunSpec keys; the rest keep their defaults) and what to look for in the curves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from playground.sweep import prompt_sets
from playground.sweep.knobs import parse_values
from playground.sweep.run import Sweep


@dataclass(frozen=True)
class SweepPreset:
    knob: str
    values: str  # as typed in the values box: comma-separated
    prompt_set: str
    prompt_count: int
    spec: dict[str, Any] = field(default_factory=dict)
    seeds: int = 1
    note: str = ""

    def sweep(self) -> Sweep:
        """The sweep as the page runs it from this preset (the base holds the knob's first value)."""
        return Sweep.over(self.knob, parse_values(self.knob, self.values), self.spec,
                          prompt_sets.prompt_set(self.prompt_set)[: self.prompt_count], self.seeds)


SWEEP_PRESETS: dict[str, SweepPreset] = {
    "Temperature on story starts": SweepPreset(
        knob="temperature", values="0.2,0.6,1.0,1.4", prompt_set="stories", prompt_count=3, seeds=2,
        spec={"strategy": "sampling", "backend": "jax", "max_new_tokens": 64, "chat": False},
        note="without the chat template the model continues the text, and at a low temperature it soon repeats "
             "itself: distinct-2 rises and the mean log-probability falls as the temperature grows. The temperature "
             "is an argument of the compiled JAX programs, so no value after the first compiles."),
    "Sliding window on a long output": SweepPreset(
        knob="window", values="16,32,64,128,256", prompt_set="stories", prompt_count=2,
        spec={"strategy": "greedy", "cache": "sliding", "backend": "jax", "max_new_tokens": 128},
        note="agreement with full attention rises with the window, and reaches 1.0 once the window holds the "
             "prompt and all 128 new tokens; the KV cache grows with it."),
    "Quantized cache: 2, 4 and 8 bits": SweepPreset(
        knob="cache_bits", values="2,4,8", prompt_set="stories", prompt_count=3,
        spec={"strategy": "greedy", "cache": "quantized", "residual_length": 16, "backend": "jax",
              "max_new_tokens": 64},
        note="agreement with the fp32 cache grows with the bits (on SmolLM2 from near 0 at 2 bits to 1.0 at 8), "
             "and the KV bytes grow from 2 to 4 bits; 8 bits keeps no full-precision residual, so at this length "
             "it holds about as many bytes as 4 bits with its 16-token residual."),
    "Prompt-lookup drafts on grounded prompts": SweepPreset(
        knob="prompt_lookup", values="2,4,8,16,32", prompt_set="grounded", prompt_count=4,
        spec={"strategy": "assisted", "backend": "jax", "max_new_tokens": 64},
        note="tokens per forward pass rise with the draft length; tokens/s rises while drafts are accepted, "
             "then falls once long drafts are rejected often enough that verifying them costs more than they save "
             "(on SmolLM2 it peaks around 8)."),
    "DRY against repetition": SweepPreset(
        knob="dry_multiplier", values="0,0.4,0.8,1.6", prompt_set="repeating", prompt_count=3, seeds=2,
        spec={"strategy": "sampling", "backend": "jax", "max_new_tokens": 64, "chat": False, "temperature": 0.7},
        note="stories that have begun repeating a sentence, continued at temperature 0.7: without DRY (0) the model "
             "copies the sentence again, and the share of repeated 4-grams falls (distinct-2 rises) as DRY's "
             "multiplier grows. Its values are arguments of the compiled programs, so only the first value with "
             "DRY on compiles."),
    "Top-nσ at high temperature": SweepPreset(
        knob="top_n_sigma", values="0,0.5,1,2", prompt_set="stories", prompt_count=3, seeds=2,
        spec={"strategy": "sampling", "backend": "jax", "max_new_tokens": 64, "temperature": 1.5, "top_k": 0},
        note="at temperature 1.5 with nothing else cutting, n = 0 (off) samples from the whole tail and the mean "
             "log-probability is lowest; any n keeps only the tokens within n standard deviations of the best logit, "
             "and the smaller n, the higher the mean log-probability and the lower distinct-2."),
}

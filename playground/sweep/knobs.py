"""The knobs a sweep can move and how their values are written (no torch here: the CLI's help reads it)."""

from __future__ import annotations

from playground.errors import PlaygroundError

# the knobs a sweep moves: arguments of a compiled program (sampling) or shapes of one (beams, caches)
KNOBS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "num_beams", "window", "sink_tokens",
         "cache_bits", "residual_length", "prompt_lookup", "max_new_tokens")
INTEGER_KNOBS = {"top_k", "num_beams", "window", "sink_tokens", "cache_bits", "residual_length", "prompt_lookup",
                 "max_new_tokens"}
MAX_VALUES = 12
# the measure a sweep's quality-against-speed scatter plots for each knob: what that knob is known to move
QUALITY_MEASURE = {"temperature": "distinct_2", "top_p": "distinct_2", "top_k": "distinct_2", "min_p": "distinct_2",
                   "repetition_penalty": "repeat_4gram_rate", "num_beams": "mean_logprob", "window": "agreement",
                   "sink_tokens": "agreement", "cache_bits": "agreement", "residual_length": "agreement",
                   "prompt_lookup": "tokens_per_pass", "max_new_tokens": "mean_logprob"}


def parse_values(knob: str, text: str) -> tuple[float | int, ...]:
    """Comma-separated values of `knob`: whole numbers for the integer knobs."""
    if knob not in KNOBS:
        raise PlaygroundError(f"cannot sweep {knob!r}; the knobs are {', '.join(KNOBS)}")
    parts = [part.strip() for part in str(text).split(",") if part.strip()]
    if not parts:
        raise PlaygroundError(f"no values given for {knob}: write them separated by commas, e.g. 0.2,0.7,1.2")
    try:
        values = tuple(int(p) if knob in INTEGER_KNOBS else float(p) for p in parts)
    except ValueError:
        kind = "whole numbers" if knob in INTEGER_KNOBS else "numbers"
        raise PlaygroundError(f"{knob} values must be {kind} separated by commas, got {text!r}") from None
    if len(values) > MAX_VALUES:
        raise PlaygroundError(f"{len(values)} values given; a sweep takes at most {MAX_VALUES}")
    if len(set(values)) != len(values):
        raise PlaygroundError(f"{knob} values repeat: {text!r}")
    return values


def compile_note(knob: str, shapes: bool) -> str:
    """What a JAX sweep of `knob` compiles, and why; `shapes` is the registry's word on whether the knob sets an
    array shape in the compiled programs (max_new_tokens sizes the cache, so it does too)."""
    if shapes:
        return (f"{knob} sets an array shape in the compiled JAX programs, so each new value compiles its own "
                "programs (first time only: they are cached for later sweeps)")
    return (f"{knob} is an argument of the compiled JAX programs: one compile serves every value of the sweep, "
            "and later values report a compile time of 0 s")

"""The knobs a sweep can move and how their values are written (no torch here: the CLI's help reads it)."""

from __future__ import annotations

from playground.errors import PlaygroundError

# the knobs a sweep moves: arguments of a compiled program (sampling) or shapes of one (beams, caches)
KNOBS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "num_beams", "window", "sink_tokens",
         "cache_bits", "residual_length", "prompt_lookup", "max_new_tokens")
INTEGER_KNOBS = {"top_k", "num_beams", "window", "sink_tokens", "cache_bits", "residual_length", "prompt_lookup",
                 "max_new_tokens"}
MAX_VALUES = 12


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

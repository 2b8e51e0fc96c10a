"""The knobs a sweep can move and how their values are written (no torch here: the CLI's help reads it)."""

from __future__ import annotations

from playground import registry
from playground.errors import PlaygroundError

MAX_VALUES = 12
KnobValue = float | int | str  # a value a sweep sets: a number, or a name among a knob's choices


def sweepable() -> tuple[str, ...]:
    """The knobs a sweep moves (arguments of a compiled program, such as a temperature, or shapes of one, such
    as a beam count): those whose registry record names the measure a sweep of them plots."""
    return tuple(knob.name for knob in registry.knobs() if knob.sweep)


def quality_measure(knob: str) -> str:
    """The measure a sweep's quality-against-speed scatter plots for `knob`: what that knob is known to move."""
    return registry.knob(knob).sweep


# the new tokens a run may make: a dynamic cache ends holding them, a preallocated one is sized for them
LENGTH_KNOB = "max_new_tokens"


def moves_kv_cache(knob: str) -> bool:
    """Whether a sweep of `knob` can change the KV cache's size: a knob a cache type reads (window, bits, residual,
    sinks), the one that sets how many rows a strategy's cache keeps (num_beams), or the length. Any other knob
    only changes which tokens are picked, and the cache holds the same positions at the same precision."""
    return (knob == LENGTH_KNOB or any(knob in cache.knobs for cache in registry.caches())
            or any(knob == strategy.rows_knob for strategy in registry.strategies()))


def moves_tokens_per_pass(strategy: str) -> bool:
    """Whether a sweep on `strategy` can change the tokens per main-model forward pass: a strategy that verifies
    drafts (more than one per pass when drafts are kept), or one that keeps several rows (beam search: its best
    sequence may finish before the search does). Greedy and sampling make one token per pass whatever the knob."""
    found = registry.strategy(strategy)
    return found.drafts or found.rows_knob is not None


def follows_greedy(strategy: str) -> bool:
    """Whether a run of `strategy` can agree with the greedy reference by more than chance: one that always samples
    leaves it at whichever early draw first differs, so its agreed prefix stays near 0 whatever the knob."""
    return registry.strategy(strategy).sampling != "always"


def returns_several(strategy: str) -> bool:
    """Whether a run of `strategy` can return several sequences (beam-type strategies), whose overlap a sweep plots."""
    return "num_return_sequences" in registry.strategy(strategy).knobs


def categorical(knob: str) -> bool:
    """Whether the knob's values are names (a store's dtype), drawn as categories rather than on a number axis."""
    return registry.knob(knob).kind is str


def parse_values(knob: str, text: str) -> tuple[KnobValue, ...]:
    """Comma-separated values of `knob`: whole numbers for the integer knobs, names among its choices for a knob
    of names."""
    knobs = sweepable()
    if knob not in knobs:
        raise PlaygroundError(f"cannot sweep {knob!r}; the knobs are {', '.join(knobs)}")
    found = registry.knob(knob)
    integer = found.kind is int
    parts = [part.strip() for part in str(text).split(",") if part.strip()]
    if not parts:
        example = ",".join(map(str, found.choices)) if categorical(knob) else "0.2,0.7,1.2"
        raise PlaygroundError(f"no values given for {knob}: write them separated by commas, e.g. {example}")
    values: tuple[KnobValue, ...]
    if categorical(knob):
        unknown = [p for p in parts if p not in found.choices]
        if unknown:
            raise PlaygroundError(f"{knob} values {', '.join(unknown)} are not among its choices: "
                                  f"{', '.join(map(str, found.choices))}")
        values = tuple(parts)
    else:
        try:
            values = tuple(int(p) if integer else float(p) for p in parts)
        except ValueError:
            kind = "whole numbers" if integer else "numbers"
            raise PlaygroundError(f"{knob} values must be {kind} separated by commas, got {text!r}") from None
    if len(values) > MAX_VALUES:
        raise PlaygroundError(f"{len(values)} values given; a sweep takes at most {MAX_VALUES}")
    if len(set(values)) != len(values):
        raise PlaygroundError(f"{knob} values repeat: {text!r}")
    return values


def compile_note(knob: str, shapes: bool) -> str:
    """What a JAX sweep of `knob` compiles, and why; `shapes` is the registry's word on whether the knob sets an
    array shape in the compiled programs (max_new_tokens sizes the cache)."""
    if shapes:
        return (f"{knob} sets an array shape in the compiled JAX programs, so each new value compiles its own "
                "programs (first time only: they are cached for later sweeps)")
    return (f"{knob} is an argument of the compiled JAX programs: one compile serves every value of the sweep, "
            "and later values report a compile time of 0 s (a value that turns its stage of the logits chain on or "
            "off, such as a top-p of 1, compiles once more)")

"""Which stages of the logits chain a run applies, in which order: one answer for both backends and the page.

The default order is the registry's (playground/registry/builtin_chain.py). `sampler_order` names stages in the
order wanted: those stages trade places among the positions they hold by default, and every other stage keeps
its own, so reordering temperature and min-p never moves a penalty behind a filter by accident.
"""

from __future__ import annotations

import json
from typing import Any

from playground.errors import PlaygroundError
from playground.registry import store
from playground.registry.entries import Processor


def parse_order(text: str) -> tuple[str, ...]:
    """The stage names of a `sampler_order` value; refuses unknown and repeated names, naming the stages."""
    names = tuple(part.strip() for part in str(text).split(",") if part.strip())
    known = [stage.name for stage in store.processors()]
    for name in names:
        if name not in known:
            raise PlaygroundError(f"sampler_order names {name!r}, which is not a stage of the logits chain; "
                                  f"the stages are: {', '.join(known)}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise PlaygroundError(f"sampler_order names {', '.join(repeated)} more than once; name each stage once")
    return names


def ordered(sampler_order: str = "") -> tuple[Processor, ...]:
    """Every registered stage, in the order `sampler_order` asks for."""
    stages = list(store.processors())
    named = parse_order(sampler_order)
    if not named:
        return tuple(stages)
    slots = [i for i, stage in enumerate(stages) if stage.name in named]  # the positions the named ones hold
    for slot, name in zip(slots, named, strict=True):
        stages[slot] = store.processor(name)
    return tuple(stages)


def samples(spec: Any) -> bool:
    """Whether the spec's strategy takes its tokens from the sampling stages (else from the processors alone)."""
    return store.strategy(spec.strategy).samples(spec.assisted_sampling)


def stages(spec: Any, *, sampling: bool | None = None) -> tuple[Processor, ...]:
    """The stages this run applies, in order: the active processors, and the active sampling stages when the
    strategy samples (`sampling` overrides the strategy's word, for a draft model or a beam search)."""
    sampled = samples(spec) if sampling is None else sampling
    return tuple(stage for stage in ordered(spec.sampler_order)
                 if (sampled or not stage.samples_only) and stage.active(spec))


def describe(spec: Any) -> str:
    """What stands between the model's logits and the chosen token, in the order applied."""
    steps = [stage.describe(spec) for stage in stages(spec) if stage.shown(spec)]
    end = "draw" if samples(spec) else f"{spec.strategy}: {store.strategy(spec.strategy).picks}"
    return " → ".join([*steps, end])


def parse_breakers(text: str) -> tuple[str, ...]:
    """DRY's sequence breakers: a JSON list of non-empty strings, as text-generation-webui writes them."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise PlaygroundError(f'dry_sequence_breakers must be a JSON list of non-empty strings, e.g. ["\\n", ":"]; '
                              f"got {text!r}")
    return tuple(value)


MAX_BIASED = 300  # tokens one logit_bias may name, as OpenAI allows
MAX_BIAS = 100.0


def parse_logit_bias(text: str) -> tuple[tuple[int, float], ...]:
    """logit_bias as (token id, bias) pairs, by id: a JSON object {"id": bias}, as OpenAI's API takes it."""
    if not text.strip():
        return ()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or len(value) > MAX_BIASED:
        raise PlaygroundError(f'logit_bias must be a JSON object of up to {MAX_BIASED} token ids and biases, e.g. '
                              f'{{"50256": -100}}; got {text!r}')
    pairs: dict[int, float] = {}
    for key, bias in value.items():
        if not key.strip().isdigit() or int(key) in pairs:
            raise PlaygroundError(f"logit_bias key {key!r} is not a token id; allowed: distinct whole numbers from 0")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -MAX_BIAS <= bias <= MAX_BIAS:
            raise PlaygroundError(f"logit_bias[{key!r}]={bias!r} is out of range; allowed: [-{MAX_BIAS:g}, "
                                  f"{MAX_BIAS:g}]")
        pairs[int(key)] = float(bias)
    return tuple(sorted(pairs.items()))

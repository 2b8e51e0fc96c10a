"""What decoding has cost on this server: decode milliseconds per token, measured by the runs it finished.

A draft model pays only when it costs much less per token than the main model and most of its drafts are
accepted. On a small CPU neither is sure: SmolLM2 drafting for Gemma-3 (another tokenizer, so every draft is
re-tokenized) ran several times slower than Gemma-3 alone. So a column that drafts with a model says, before it
runs, what each model's decoding has cost here, and what the same pair cost the last time it ran, from the runs
this process finished (figures it has not measured are not shown, and no figure is estimated).
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from playground import registry
from playground.result import Result
from playground.spec import RunSpec


class CostKey(NamedTuple):
    model: str
    weights: str
    backend: str
    draft: str | None  # a draft model's name (assisted decoding with a model); None for decoding without drafts


class Cost(NamedTuple):
    ms_per_token: float  # decode time per new token after the first (compile, load and prefill excluded)
    busy: bool  # measured while other work shared the machine


class DecodeCosts:
    """The latest decode cost of each (model, weights, backend, draft), thread-safe."""

    def __init__(self) -> None:
        self._costs: dict[CostKey, Cost] = {}
        self._lock = threading.Lock()

    def record(self, result: Result) -> None:
        """Keep a finished run's decode cost when it decoded one sequence without prompt lookup: plain greedy or
        sampling (a model's own cost), or assisted decoding with a draft model (the pair's)."""
        spec = result["spec"]
        strategy = registry.strategy(spec["strategy"])
        rate = result["metrics"].get("tokens_per_s")
        if not rate or result["stopped"] or not (strategy.plain or strategy.drafts):
            return
        draft = drafting_model(spec["strategy"], spec.get("assistant"), spec.get("prompt_lookup"))
        if strategy.drafts and draft is None:  # prompt lookup: no model's cost in it
            return
        key = CostKey(spec["model"], spec["weights"], spec["backend"], draft)
        with self._lock:
            busy = bool((result.get("extra", {}).get("machine_load") or {}).get("busy"))
            self._costs[key] = Cost(1000.0 / rate, busy)

    def get(self, key: CostKey) -> Cost | None:
        with self._lock:
            return self._costs.get(key)

    def clear(self) -> None:
        with self._lock:
            self._costs.clear()


DECODE_COSTS = DecodeCosts()


def drafting_model(strategy: str, assistant: str | None, prompt_lookup: int | None) -> str | None:
    """The draft model a run drafts with; None for a strategy without drafts or drafts looked up in the prompt."""
    return assistant if registry.strategy(strategy).drafts and assistant and not prompt_lookup else None


def _figure(cost: Cost) -> str:
    return f"{cost.ms_per_token:.0f} ms/token" + (" (busy machine)" if cost.busy else "")


def draft_note(spec: RunSpec, costs: DecodeCosts = DECODE_COSTS) -> str:
    """For assisted decoding with a draft model: each model's measured decode cost here and the pair's last run;
    '' for every other column."""
    assistant = drafting_model(spec.strategy, spec.assistant, spec.prompt_lookup)
    if assistant is None:
        return ""
    main = costs.get(CostKey(spec.model, spec.weights, spec.backend, None))
    draft = costs.get(CostKey(assistant, spec.weights, spec.backend, None))  # a draft loads at the main's weights
    pair = costs.get(CostKey(spec.model, spec.weights, spec.backend, assistant))
    where = f"decoding alone on this server ({spec.backend})"
    if main and draft:
        parts = [f"draft {assistant} {_figure(draft)} against {spec.model} {_figure(main)} {where}: the draft "
                 f"costs {draft.ms_per_token / main.ms_per_token:.2f}x the main model per token"]
    else:
        missing = " and ".join(name for name, cost in ((assistant, draft), (spec.model, main)) if cost is None)
        parts = [f"the cost per token of {missing} is not measured here yet: run it alone (greedy, {spec.backend}) "
                 f"to see it before drafting with {assistant}"]
    if pair:
        alone = f" against {_figure(main)} alone" if main else ""
        parts.append(f"the last run of this pair took {_figure(pair)}{alone}")
    return "ℹ Drafting pays only when the draft is much cheaper per token and most drafts are accepted; " + \
        "; ".join(parts) + "."


def against_alone(result: Result, costs: DecodeCosts = DECODE_COSTS) -> str:
    """For a finished run that drafted with a model: the main model's measured speed alone here, as a comparison;
    '' otherwise."""
    spec = result["spec"]
    rate = result["metrics"].get("tokens_per_s")
    if drafting_model(spec["strategy"], spec.get("assistant"), spec.get("prompt_lookup")) is None:
        return ""
    main = costs.get(CostKey(spec["model"], spec["weights"], spec["backend"], None))
    if not main or not rate:
        return ""
    ratio = rate * main.ms_per_token / 1000.0
    return f"{spec['model']} alone: {1000.0 / main.ms_per_token:.1f} tok/s here ({ratio:.2f}x with this draft)"

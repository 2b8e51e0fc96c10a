"""The sampler lab: any distribution through the logits chain, stage by stage, with no model (`python -m
playground chain` and the page's lab tab).

Backend-free: it checks the request, builds the chain's RunSpec (every stage off unless one of its knobs is
named; temperature 1) and reads what each stage left; the backend's module (playground/backends/*/lab.py) is
imported only when a request runs, so the page never imports torch or jax to show the tab.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from playground import registry
from playground.errors import PlaygroundError
from playground.registry import chain
from playground.spec import RunSpec

MAX_ENTRIES = 300_000  # a distribution's entries: more than any bundled model's vocabulary (Gemma 3: 262,144)
# stages the lab leaves out: the constraint needs a tokenizer, min_new_tokens the model's end-of-text ids
NOT_IN_THE_LAB = ("constraint", "min_new_tokens")
# DRY's breakers as strings need a tokenizer; the lab takes them as ids (LabRequest.breakers)
NOT_A_LAB_KNOB = ("dry_sequence_breakers",)


def lab_knobs() -> tuple[str, ...]:
    """The knobs the lab takes: every stage's of the chain (but those it leaves out), the order and the seed."""
    names: list[str] = []
    for stage in registry.processors():
        if stage.name not in NOT_IN_THE_LAB:
            names += [knob for knob in stage.knobs if knob not in names and knob not in NOT_A_LAB_KNOB]
    return (*names, "sampler_order", "seed")


def lab_knob(name: str) -> registry.Knob:
    """A knob's record with its lab range as its range, for the lab's widget: a slider where the range is
    finite, an unbounded number box where it is not. Unbounded, because a browser's number box clamps a value
    past its bound without a word (top-k -3 became 0, and the stage silently off); the request's check then
    refuses it in one line that names the range."""
    knob = registry.knob(name)
    bounds = knob.lab_range
    if knob.lab is None or bounds is None:
        return knob
    if math.isinf(bounds.low) or math.isinf(bounds.high):
        return dataclasses.replace(knob, low=None, high=None, step=None)
    return dataclasses.replace(knob, low=bounds.low, high=bounds.high, low_open=bounds.low_open)


class StageResult(TypedDict):
    name: str  # the stage's registry name
    label: str  # its label with the request's values
    kept: list[int]  # the ids it left, most likely first
    p: list[float]  # their probabilities after it
    removed: list[int]  # the ids it removed
    moved: float  # probability mass it moved: total variation between the distributions before and after it


class Drawn(TypedDict):
    id: int
    p: float


class LabResult(TypedDict):
    backend: str
    stages: list[StageResult]
    final: list[Drawn]  # the distribution a token would be drawn from: every id with p > 0, most likely first


@dataclass(frozen=True)
class LabRequest:
    """A distribution as logits (removed entries -inf), the text generated so far, and the chain's settings."""

    logits: tuple[float, ...]
    history: tuple[int, ...]
    spec: RunSpec
    named: tuple[str, ...]  # the knobs given: a stage is in the lab's chain only when one of its knobs is
    backend: str = "torch"
    breakers: frozenset[int] = frozenset()


def parse_numbers(field: str, text: str) -> tuple[float, ...]:
    """Comma- or space-separated numbers; -inf is allowed (a removed entry's logit)."""
    parts = [part for part in str(text).replace(",", " ").split() if part]
    if not parts:
        raise PlaygroundError(f"{field} is empty; write numbers separated by commas, e.g. 0.5,0.3,0.2")
    if len(parts) > MAX_ENTRIES:
        raise PlaygroundError(f"{field} has {len(parts)} entries; allowed: at most {MAX_ENTRIES}")
    try:
        values = tuple(float(part) for part in parts)
    except ValueError:
        bad = next(part for part in parts if not _is_number(part))
        raise PlaygroundError(f"{field} entry {bad!r} is not a number; write numbers separated by commas") from None
    return values


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_ids(field: str, text: str) -> tuple[int, ...]:
    """Comma- or space-separated token ids (whole numbers >= 0); empty: none."""
    ids = []
    for part in (part for part in str(text or "").replace(",", " ").split() if part):
        if not part.isdigit():
            raise PlaygroundError(f"{field} entry {part!r} is not a token id; allowed: whole numbers >= 0")
        ids.append(int(part))
    return tuple(ids)


def _numbers(field: str, values: Sequence[Any]) -> None:
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PlaygroundError(f"{field}[{i}]={value!r} is not a number")


def logits_of(probs: Sequence[float] | None = None, logits: Sequence[float] | None = None) -> tuple[float, ...]:
    """The distribution as logits: probabilities (normalised; 0 is a removed entry) or logits as given."""
    if (probs is None) == (logits is None):
        raise PlaygroundError("give the distribution once: probabilities (--probs) or logits (--logits)")
    _numbers("probs", probs or ())
    _numbers("logits", logits or ())
    if logits is not None:
        for i, value in enumerate(logits):
            if math.isnan(value) or value == math.inf:
                raise PlaygroundError(f"logits[{i}]={value} is not allowed; logits are finite numbers, or -inf for "
                                      "an entry already removed")
        if all(value == -math.inf for value in logits):
            raise PlaygroundError("logits are all -inf: no token is left to draw")
        return tuple(logits)
    assert probs is not None
    for i, value in enumerate(probs):
        if not (math.isfinite(value) and value >= 0):
            raise PlaygroundError(f"probs[{i}]={value} is not allowed; probabilities are finite numbers >= 0")
    total = math.fsum(probs)
    if total <= 0:
        raise PlaygroundError("probs are all zero; at least one probability must be above 0")
    return tuple(math.log(value / total) if value > 0 else -math.inf for value in probs)


def lab_backends() -> tuple[str, ...]:
    """The backends with a side of the lab (the `chain` command's and the lab tab's choices)."""
    return tuple(b.name for b in registry.backends() if b.lab)


def request(distribution: Mapping[str, Any], knobs: Mapping[str, Any], *, history: Sequence[int] = (),
            backend: str = "torch", breakers: Sequence[int] = ()) -> LabRequest:
    """A checked request: `distribution` holds `probs` or `logits`, `knobs` the lab knobs given (by name)."""
    if backend not in lab_backends():
        raise PlaygroundError(f"backend {backend!r} is not one of: {', '.join(lab_backends())}")
    values = logits_of(distribution.get("probs"), distribution.get("logits"))
    vocab = len(values)
    for field, ids in (("history", history), ("dry_breaker_ids", breakers)):
        for i, token in enumerate(ids):
            if isinstance(token, bool) or not isinstance(token, int):
                raise PlaygroundError(f"{field}[{i}]={token!r} is not a token id; allowed: whole numbers >= 0")
            if not 0 <= token < vocab:
                raise PlaygroundError(f"{field}[{i}]={token} is out of range: the distribution has {vocab} entries, "
                                      f"so ids run from 0 to {vocab - 1}")
    unknown = sorted(set(knobs) - set(lab_knobs()))
    if unknown:
        raise PlaygroundError(f"{', '.join(unknown)}: not a knob of the lab; the knobs are {', '.join(lab_knobs())}")
    base = {"strategy": "sampling", "top_k": 0}  # the sampling stages apply; top-k is off unless named
    spec = RunSpec.for_lab({**base, **knobs})  # each knob within its lab range (Knob.lab_range)
    return LabRequest(values, tuple(history), spec, tuple(knobs), backend, frozenset(breakers))


def stages(lab: LabRequest) -> tuple[registry.Processor, ...]:
    """The stages the lab applies, in the chain's order: the active ones whose knobs were named."""
    return tuple(stage for stage in chain.stages(lab.spec, sampling=True)
                 if stage.name not in NOT_IN_THE_LAB and set(stage.knobs) & set(lab.named) and stage.shown(lab.spec))


def run(lab: LabRequest) -> LabResult:
    """Each stage's kept and removed ids and the mass it moved, and the final distribution, on the request's
    backend."""
    applied = stages(lab)
    backend = importlib.import_module(registry.backend_type(lab.backend).lab)
    logits = np.asarray(lab.logits, np.float32)
    outputs = backend.stage_logits(lab.spec, logits, lab.history, tuple(stage.name for stage in applied),
                                   lab.breakers)
    before, alive = _softmax(logits), np.isfinite(logits)
    results: list[StageResult] = []
    for stage, stage_output in zip(applied, outputs, strict=True):
        after_logits = np.asarray(stage_output)
        after, left = _softmax(after_logits), np.isfinite(after_logits)  # kept: not -inf (p may underflow to 0)
        kept = _most_likely_first(after, left)
        results.append({"name": stage.name, "label": stage.describe(lab.spec), "kept": kept.tolist(),
                        "p": after[kept].tolist(), "removed": np.flatnonzero(alive & ~left).tolist(),
                        "moved": float(0.5 * np.abs(after - before).sum())})
        before, alive = after, left
    order = _most_likely_first(before, before > 0)
    return {"backend": lab.backend, "stages": results,
            "final": [{"id": i, "p": p} for i, p in zip(order.tolist(), before[order].tolist(), strict=True)]}


def _most_likely_first(p: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The ids where `keep` holds, most likely first (ties by id), on the array: a 262,144-token vocabulary
    (Gemma 3's) sorts in milliseconds where a Python loop over it took seconds."""
    ids = np.flatnonzero(keep)
    return ids[np.argsort(-p[ids], kind="stable")]


def _softmax(logits: Any) -> np.ndarray:
    values = np.asarray(logits, np.float64)
    finite = np.isfinite(values)
    shifted = np.where(finite, values - values[finite].max(), -np.inf)
    weights = np.exp(shifted)
    return weights / weights.sum()


def format_table(result: LabResult, shown: int = 8) -> str:
    """The result as lines: each stage with what it kept (the `shown` most likely) and removed, then the final
    distribution."""
    lines = []
    for stage in result["stages"]:
        kept = ", ".join(f"{i}:{p:.4f}" for i, p in zip(stage["kept"][:shown], stage["p"][:shown], strict=False))
        more = f" (+{len(stage['kept']) - shown} more)" if len(stage["kept"]) > shown else ""
        lines.append(f"{stage['label']}: kept {len(stage['kept'])} [{kept}{more}], removed {len(stage['removed'])}, "
                     f"moved {stage['moved']:.4f}")
    final = ", ".join(f"{entry['id']}:{entry['p']:.4f}" for entry in result["final"][:shown])
    lines.append(f"final ({len(result['final'])} tokens, {result['backend']}): {final}")
    return "\n".join(lines)

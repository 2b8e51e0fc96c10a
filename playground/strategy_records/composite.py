"""Every built-in strategy's record pieces joined into one type each, for the shared types to inherit.

The backends' `TokenInfo` and `GenerationOutput`, the PyTorch plug-ins' `Recorded` and the Result's `TokenRecord`,
`Result` and `Metrics` extend these, so they stay typed end to end while naming no strategy: a strategy's fields
are declared once, in its own module here. A strategy registered from outside needs no piece (its values ride
untyped in `extra` and under its own keys)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from playground.strategy_records.assisted import (
    AssistMetrics,
    AssistOutputs,
    AssistRunRecords,
    AssistTokenRecord,
    assist_metrics,
)
from playground.strategy_records.beam import BeamOutputs, BeamRunRecords
from playground.strategy_records.contrastive import ContrastiveTokenInfo, ContrastiveTokenRecord
from playground.strategy_records.dola import DolaTokenInfo, DolaTokenRecord


class StrategyTokenInfo(ContrastiveTokenInfo, DolaTokenInfo, total=False):
    """What a backend may record per token for the strategy that ran, beside every strategy's probabilities."""


@dataclass(kw_only=True)
class StrategyOutputs(BeamOutputs, AssistOutputs):
    """A backend's output fields that only some strategies fill (None on the others)."""


def outputs_of(recorded: StrategyOutputs) -> dict[str, Any]:
    """The strategy fields of a plug-in's record, to hand on to the output as keyword arguments."""
    return {field.name: getattr(recorded, field.name) for field in dataclasses.fields(StrategyOutputs)}


class StrategyTokenRecords(AssistTokenRecord, ContrastiveTokenRecord, DolaTokenRecord):
    """The Result's per-token keys of the built-in strategies (each entry's `token_records` builds them)."""


class StrategyRunRecords(BeamRunRecords, AssistRunRecords):
    """The Result's top-level keys of the built-in strategies (each entry's `run_records` builds them)."""


class StrategyMetrics(AssistMetrics):
    """The metrics only some strategies measure (None on the others)."""


def strategy_metrics(output: StrategyOutputs) -> StrategyMetrics:
    """Those metrics, from a backend's output."""
    return {**assist_metrics(output)}

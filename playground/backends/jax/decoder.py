"""The JAX backend: a torchax-traced HF model under jax.jit, each request run by the shared loop (loop.py) with
its strategy's plug-in (strategies.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from playground.backends.base import EmitTokens, GenerationOutput, ReportProgress, ShouldStop
from playground.backends.jax import loop
from playground.backends.jax.architectures import check_architecture
from playground.backends.jax.engine import compile_notices
from playground.backends.jax.strategies import plugin_for
from playground.backends.jax.strategy import STEPS_PER_CALL
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec

__all__ = ["COMPILING", "STEPS_PER_CALL", "JaxBackend", "generate"]


class JaxBackend:
    """The torchax-traced model under jax.jit: prefill and chunked decode over a static cache."""

    name = "jax"

    def generate(self, loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
                 should_stop: ShouldStop, draft: LoadedModel | None = None,
                 progress: ReportProgress | None = None) -> GenerationOutput:
        check_architecture(loaded.model.config)
        with compile_notices(_announce_once(progress)):
            return generate(loaded, input_ids, spec, emit, should_stop, draft)


COMPILING = "compiling for this prompt length, first time only; cached afterwards"


def _announce_once(progress: ReportProgress | None) -> Callable[[], None]:
    """Say so when the request's first program starts compiling; a cached request says nothing."""
    said = False

    def announce() -> None:
        nonlocal said
        if progress is not None and not said:
            said = True
            progress(0.0, COMPILING)
    return announce


def generate(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
             should_stop: ShouldStop, draft: LoadedModel | None = None) -> GenerationOutput:
    """One request of `spec` (already validated: RunSpec refuses what this path cannot run), streaming through
    `emit`; no compile announcements (JaxBackend.generate adds them)."""
    return loop.generate(loaded, input_ids, spec, emit, should_stop, plugin_for(spec, draft))

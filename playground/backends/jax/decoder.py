"""A JAX request: the shared loop (loop.py) run with the plug-in the strategy's registry entry builds."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from playground import registry
from playground.backends.base import EmitTokens, GenerationOutput, PreviewTokens, ReportProgress, ShouldStop
from playground.backends.jax import loop
from playground.backends.jax.strategy import STEPS_PER_CALL, Strategy
from playground.backends.prefix_store import ReusePlan
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec

__all__ = ["COMPILING", "STEPS_PER_CALL", "announce_once", "generate", "plugin_for"]


COMPILING = "compiling the JAX programs for this prompt length (first time only, usually 5-60 s; cached afterwards)"


def announce_once(progress: ReportProgress | None) -> Callable[[], None]:
    """Say so when the request's first program starts compiling; a cached request says nothing."""
    said = False

    def announce() -> None:
        nonlocal said
        if progress is not None and not said:
            said = True
            progress(0.0, COMPILING)
    return announce


def generate(loaded: LoadedModel, prompt_ids: Sequence[int], spec: RunSpec, emit: EmitTokens,
             should_stop: ShouldStop, draft: LoadedModel | None = None,
             preview: PreviewTokens | None = None, reuse: ReusePlan | None = None) -> GenerationOutput:
    """One request of `spec` (already validated: RunSpec refuses what this path cannot run), streaming through
    `emit`; no compile announcements (JaxBackend.generate adds them)."""
    return loop.generate(loaded, prompt_ids, spec, emit, should_stop, plugin_for(spec, draft), preview, draft, reuse)


def plugin_for(spec: RunSpec, draft: LoadedModel | None = None) -> Strategy:
    """A request's plug-in, from the strategy's registry entry."""
    make_plugin = registry.strategy(spec.strategy).plugin("jax")
    if make_plugin is None:  # RunSpec refuses such a spec before it gets here
        raise ValueError(f"strategy {spec.strategy!r} has no JAX plug-in")
    return make_plugin(spec, draft)

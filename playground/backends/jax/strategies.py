"""STRATEGY_PLUGINS: the one mapping from a spec's strategy to the plug-in that runs it on the JAX path."""

from __future__ import annotations

from playground.backends.jax.assisted import assisted
from playground.backends.jax.beam import beam
from playground.backends.jax.plain import greedy, sampled
from playground.backends.jax.strategy import Strategy, StrategyFactory
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec

# strategy name -> factory(spec, draft model or None) -> a plug-in for one request
STRATEGY_PLUGINS: dict[str, StrategyFactory] = {
    "greedy": greedy,
    "sampling": sampled,
    "beam": beam,
    "assisted": assisted,
}


def plugin_for(spec: RunSpec, draft: LoadedModel | None = None) -> Strategy:
    """A new plug-in for one request of `spec` (already validated: its strategy is one of the mapping's)."""
    return STRATEGY_PLUGINS[spec.strategy](spec, draft)

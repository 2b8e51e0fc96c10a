"""The built-in backends: PyTorch's model.generate and the jitted JAX decoder, each registered once.

An entry (a cache, a strategy, a stage of the logits chain) runs on a backend when its `impl` names a plug-in
under that backend's name; the registry refuses the rest, so a new backend registers here (or from its own file)
and touches no entry it does not run.
"""

from __future__ import annotations

from playground import device
from playground.registry import builtin_knobs  # noqa: F401  (the backends' own knobs)
from playground.registry.entries import BackendType, lazy
from playground.registry.store import register_backend

# weights only the JAX engine runs (its own 4-bit row pairs with a scale and minimum per group, engine/q4.py)
TORCH_REFUSED_WEIGHTS = {"q4": "q4 weights are the JAX engine's own 4-bit layout, which transformers has no layer "
                               "for; for 4-bit on PyTorch use nf4"}

register_backend(BackendType(
    name="torch", label="PyTorch", make=lazy("playground.backends.torch.backend", "TorchBackend"),
    knobs=("torch_compile", "reuse"), weights_refusals=lambda: TORCH_REFUSED_WEIGHTS,
    lab="playground.backends.torch.lab"))
register_backend(BackendType(
    name="jax", label="JAX", make=lazy("playground.backends.jax.backend", "JaxBackend"),
    knobs=("devices", "reuse"), weights_refusals=device.jax_refusals, lab="playground.backends.jax.lab"))

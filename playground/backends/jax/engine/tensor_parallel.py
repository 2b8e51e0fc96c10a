"""Tensor parallelism for the JAX decoder: a 1-D mesh over N devices, weights and KV cache split by heads.

Megatron-style: q/k/v and gate/up projections are split by output rows (heads, MLP hidden units), o/down
by input columns, so each device holds 1/N of the attention and MLP weights and of the KV cache; XLA's SPMD
partitioner inserts the all-reduces. What does not divide (KV heads of a 1-KV-head model, an odd MLP size)
is replicated; query heads must divide, since splitting them is the point.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from playground.errors import PlaygroundError
from playground.models.shapes import attention_shape, check_head_split

AXIS = "tp"
# parameter name suffix -> (which dimension is split, which config count must divide by N); an int8 weight's
# per-row scale splits with its rows, and is whole on every device where the weight is split by columns
_RULES: tuple[tuple[str, int, str], ...] = (
    (r"\.q_proj\.(weight|bias|scale)$", 0, "heads"),
    (r"\.[kv]_proj\.(weight|bias|scale)$", 0, "kv_heads"),
    (r"\.o_proj\.weight$", 1, "heads"),
    (r"\.(gate|up)_proj\.(weight|bias|scale)$", 0, "mlp"),
    (r"\.down_proj\.weight$", 1, "mlp"),
)


def make_mesh(devices: int) -> Mesh | None:
    """None for one device (plain jit); a 1-D mesh otherwise, or a PlaygroundError saying what exists."""
    if devices == 1:
        return None
    available = jax.devices()
    if len(available) < devices:
        raise PlaygroundError(
            f"devices={devices} needs {devices} JAX devices but this process has {len(available)} "
            f"({available[0].platform}); on CPU start the process with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={devices} to split the CPU into {devices} devices")
    return Mesh(np.array(available[:devices]), (AXIS,))


def counts(config: Any) -> dict[str, int]:
    """The sizes the rules split, by the names the rules use."""
    shape = attention_shape(config)
    mlp = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * config.hidden_size
    return {"heads": shape.heads, "kv_heads": shape.kv_heads, "mlp": mlp}


def check(config: Any, devices: int) -> None:
    """Query heads are what we split; refuse a device count that does not divide them."""
    check_head_split(counts(config)["heads"], devices)


def weight_spec(name: str, ndim: int, config: Any, devices: int) -> PartitionSpec:
    sizes = counts(config)
    for pattern, dim, count in _RULES:
        if re.search(pattern, name) and dim < ndim and sizes[count] % devices == 0:
            spec: list[str | None] = [None] * ndim
            spec[dim] = AXIS
            return PartitionSpec(*spec)
    return PartitionSpec()  # embeddings, norms, lm_head: replicated


def cache_spec(config: Any, devices: int) -> PartitionSpec:
    """(B, KV, S, D) split on KV heads when they divide, else replicated."""
    return PartitionSpec(None, AXIS, None, None) if counts(config)["kv_heads"] % devices == 0 else PartitionSpec()


def placer(mesh: Mesh, config: Any) -> Any:
    """place(name, host_array) -> a jax.Array laid out on the mesh by the rules above."""
    devices = mesh.devices.size

    def place(name: str, host: np.ndarray) -> jax.Array:
        return jax.device_put(host, NamedSharding(mesh, weight_spec(name, host.ndim, config, devices)))

    return place


def describe(mesh: Mesh | None, config: Any) -> dict[str, Any]:
    """What was split how, for the result's `extra`."""
    if mesh is None:
        return {"devices": 1}
    n = mesh.devices.size
    sizes = counts(config)
    return {"devices": n, "heads_per_device": sizes["heads"] // n,
            "kv_heads": "split" if sizes["kv_heads"] % n == 0 else "replicated",
            "mlp": "split" if sizes["mlp"] % n == 0 else "replicated"}

"""The HF model as torchax traces it: a weightless twin, fused projections, a GQA attention, JAX weights.

The twin lives on the meta device and only ever runs under torch.func.functional_call with JAX weights, so
tracing never swaps parameters on the user's model (the PyTorch path may be running it in another thread).
On one device, q/k/v and gate/up projections are fused into one matrix each: decoding is bound by weight
reads, and XLA's CPU matrix-vector product reads few large matrices closer to memory bandwidth than many
small ones (a 30-layer chain of SmolLM2's products went from 82% to ~100% of a jitted sum's bandwidth).
The twin's attention is our own (registered with transformers' AttentionInterface) so that the KV cache is
read in its own layout and updated in place (attention.py and caches/).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch import nn
from torchax import interop
from transformers import AttentionInterface, PreTrainedModel

from playground.backends.jax.caches.pytree import PENDING
from playground.backends.jax.engine import int8, int8_store
from playground.backends.jax.engine.int8 import Int8Linear
from playground.backends.jax.model.attention import prompt_attention

ATTENTION = "playground_jax"
FUSE_GROUPS = (("qkv_fused", ("q_proj", "k_proj", "v_proj")), ("gate_up_fused", ("gate_proj", "up_proj")))


def attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention interface entry; runs under torchax, so it can hand the work to JAX directly.

    The cache layer's update left a callback on the keys that attends the way its layout needs (see
    caches/); without a cache, the keys are the whole causal context.
    """
    scale = float(scaling if scaling is not None else query.shape[-1] ** -0.5)
    softcap = kwargs.get("softcap")
    softcap = None if softcap is None else float(softcap)
    attend = getattr(key, PENDING, None)
    if attend is None:
        out = interop.call_jax(prompt_attention, query, key, value, None, scale, softcap)
    else:
        out = interop.call_jax(attend, query, scaling=scale, softcap=softcap)
    return out, None


# No mask function is registered for our attention: transformers then builds no mask at all (a ring
# buffer's slots are not in position order, so its masks are the layouts' own).
AttentionInterface.register(ATTENTION, attention_forward)


class FusedLinear(nn.Module):
    """Several nn.Linear sharing one input, computed as one matrix product; parts read slices of it.
    With `int8`, the fused matrix is int8 with a scale per row (int8.py)."""

    def __init__(self, parts: list[nn.Linear], int8: bool = False) -> None:
        super().__init__()
        self.sizes = [p.out_features for p in parts]
        shape = (sum(self.sizes), parts[0].in_features)
        dtype = torch.int8 if int8 else torch.float32
        self.weight = nn.Parameter(torch.empty(shape, dtype=dtype, device="meta"), requires_grad=False)
        self.scale = nn.Parameter(torch.empty(shape[0], device="meta"), requires_grad=False) if int8 else None
        has_bias = parts[0].bias is not None
        self.bias = nn.Parameter(torch.empty(sum(self.sizes), device="meta")) if has_bias else None
        self._stash: tuple[torch.Tensor, torch.Tensor] | None = None

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        if self.scale is None:
            return nn.functional.linear(x, self.weight, self.bias)
        return int8.linear(x, self.weight, self.scale, self.bias, blocked=True)

    def part(self, index: int, x: torch.Tensor) -> torch.Tensor:
        # the model calls q_proj(h), k_proj(h), v_proj(h) on the same h: compute once, hand out slices
        if self._stash is None or self._stash[0] is not x:
            self._stash = (x, self._product(x))
        start = sum(self.sizes[:index])
        return self._stash[1][..., start: start + self.sizes[index]]

    def clear(self) -> None:
        self._stash = None  # drop traced tensors once a trace is done


class FusedPart(nn.Module):
    """Stands in for one of the fused nn.Linear modules (no parameters of its own)."""

    def __init__(self, owner: FusedLinear, index: int) -> None:
        super().__init__()
        self._owner = [owner]  # a list, so the owner is not registered twice as a submodule
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._owner[0].part(self.index, x)


def _fusable(module: nn.Module, names: tuple[str, ...]) -> bool:
    parts = [p for p in (getattr(module, n, None) for n in names) if type(p) is nn.Linear]
    if len(parts) < len(names):
        return False
    return len({p.in_features for p in parts}) == 1 and len({p.bias is None for p in parts}) == 1


@dataclass
class Twin:
    """The weightless model and how its parameter names map to the real model's tensors."""

    module: nn.Module
    sources: dict[str, list[str]]  # twin name -> real names (several: rows concatenated in this order)
    fused: list[FusedLinear]
    int8_scales: dict[str, str] = field(default_factory=dict)  # int8 weight's twin name -> its scale's

    def clear(self) -> None:
        for f in self.fused:
            f.clear()


def build_twin(model: PreTrainedModel, fuse: bool, int8: bool = False) -> Twin:
    """A meta-device copy of `model` using our attention, with projections fused if asked, and every linear
    layer (the output head too) int8 if asked. Embeddings, norms and biases stay fp32."""
    config = copy.deepcopy(model.config)
    # mixture-of-experts layers: the default grouped matmul (aten::_grouped_mm) has no torchax lowering; the
    # batched one gathers each token's chosen experts with fixed shapes, and reads only those experts' weights.
    # Set on the config before the twin is built: transformers' public set_attn_implementation() acts on a built
    # model and skips (only warns) any model class whose source it does not recognise; these setters always apply.
    config._attn_implementation, config._experts_implementation = ATTENTION, "batched_mm"  # noqa: SLF001 - see above
    with torch.device("meta"):
        twin = type(model)(config)
    twin.eval()
    fused: list[FusedLinear] = []
    sources: dict[str, list[str]] = {}
    if fuse:
        for path, module in list(twin.named_modules()):
            for fused_name, names in FUSE_GROUPS:
                if not _fusable(module, names):
                    continue
                owner = FusedLinear([getattr(module, n) for n in names], int8)
                setattr(module, fused_name, owner)
                for i, n in enumerate(names):
                    setattr(module, n, FusedPart(owner, i))
                prefix = f"{path}." if path else ""
                sources[f"{prefix}{fused_name}.weight"] = [f"{prefix}{n}.weight" for n in names]
                if owner.bias is not None:
                    sources[f"{prefix}{fused_name}.bias"] = [f"{prefix}{n}.bias" for n in names]
                fused.append(owner)
    if int8:
        _int8_linears(twin, blocked=fuse)
    scales = {f"{path}.weight": f"{path}.scale" for path, module in twin.named_modules(remove_duplicate=False)
              if isinstance(module, (Int8Linear, FusedLinear)) and module.scale is not None}
    for name in state_names(twin):
        if name not in scales.values():
            sources.setdefault(name, [name])
    return Twin(twin, sources, fused, scales)


def _int8_linears(twin: nn.Module, blocked: bool) -> None:
    """Every nn.Linear becomes an Int8Linear of the same shape (a mesh splits rows itself: not blocked)."""
    for module in list(twin.modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, child_name, Int8Linear(child.in_features, child.out_features,
                                                       child.bias is not None, blocked))


def state_names(module: nn.Module) -> list[str]:
    """Every parameter and buffer name, tied ones included (functional_call gets each name explicitly)."""
    names = [n for n, _ in module.named_parameters(remove_duplicate=False)]
    return names + [n for n, _ in module.named_buffers(remove_duplicate=False)]


def model_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers (non-persistent ones such as rotary inv_freq too, which state_dict() misses)."""
    return {**dict(model.named_parameters(remove_duplicate=False)),
            **dict(model.named_buffers(remove_duplicate=False))}


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu").contiguous().numpy()


def _to_jax(tensor: torch.Tensor) -> jax.Array:
    """Zero-copy through DLPack where possible (a CPU tensor shares its memory), else a copy."""
    try:
        return jax.dlpack.from_dlpack(tensor.detach().contiguous())
    except (TypeError, ValueError, RuntimeError, BufferError):
        return jnp.asarray(_to_numpy(tensor))


def _placed(name: str, parts: list[torch.Tensor], place: Any) -> jax.Array:
    """One JAX array for the tensor(s) behind a twin weight: shared memory when possible, rows stacked if fused."""
    if place is None and len(parts) == 1:
        return _to_jax(parts[0])
    host = _to_numpy(parts[0]) if len(parts) == 1 else np.concatenate([_to_numpy(p) for p in parts])
    return place(name, host) if place else jnp.asarray(host)


def source_key(twin: Twin, name: str, parts: list[torch.Tensor]) -> tuple:
    """What makes two twin weights one array: the same source tensors (tied weights), stored the same way (the
    output head quantized to int8 is not the fp32 embedding it is tied to)."""
    return (name in twin.int8_scales, *((p.data_ptr(), tuple(p.shape), p.dtype) for p in parts))


def jax_weights(model: nn.Module, twin: Twin, place: Any = None) -> dict[str, jax.Array]:
    """The twin's named weights as JAX arrays; tensors shared in the model (tied) stay one array. An int8
    weight and its scale come from the model's fp32 tensor, quantized once (int8_store.py keeps it on disk).

    `place(name, array)` puts an array on its devices (sharding); default: the default device.
    """
    tensors = model_tensors(model)
    by_source: dict[tuple, Any] = {}
    weights: dict[str, jax.Array] = {}
    for name, source_names in twin.sources.items():
        parts = [tensors[s] for s in source_names]
        scale_name = twin.int8_scales.get(name)
        key = source_key(twin, name, parts)
        if key not in by_source:
            if scale_name is None:
                by_source[key] = _placed(name, parts, place)
            else:
                q, scale = int8_store.quantized(np.concatenate([_to_numpy(p) for p in parts]))
                put = place or (lambda _, host: jnp.asarray(host))
                by_source[key] = (put(name, q), put(scale_name, scale))
        if scale_name is None:
            weights[name] = by_source[key]
        else:
            weights[name], weights[scale_name] = by_source[key]
    return weights


def weight_bytes(weights: dict[str, jax.Array]) -> int:
    """Bytes of distinct weight arrays (tied ones once), as they sit on the devices."""
    return sum(int(a.nbytes) for a in {id(a): a for a in weights.values()}.values())

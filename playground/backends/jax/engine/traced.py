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
from playground.backends.jax.engine import int8, int8_store, q4
from playground.backends.jax.engine.int8 import Int8Linear
from playground.backends.jax.engine.q4 import Q4Linear
from playground.backends.jax.model.attention import prompt_attention
from playground.errors import PlaygroundError

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
    With int8 weights the fused matrix is int8 with a scale per row (int8.py); with q4, 4-bit row pairs with a
    scale and a minimum per group (q4.py)."""

    def __init__(self, parts: list[nn.Linear], precision: str = "fp32") -> None:
        super().__init__()
        self.sizes = [p.out_features for p in parts]
        self.precision = precision
        has_bias = parts[0].bias is not None
        self.bias = nn.Parameter(torch.empty(sum(self.sizes), device="meta")) if has_bias else None
        self.scale: nn.Parameter | None = None
        self.minimum: nn.Parameter | None = None
        if precision == "q4":  # the same parameters as a Q4Linear of the fused shape
            self.weight, self.scale, self.minimum = _q4_parameters(parts[0].in_features, sum(self.sizes))
        else:
            shape = (sum(self.sizes), parts[0].in_features)
            dtype = torch.int8 if precision == "int8" else torch.float32
            self.weight = nn.Parameter(torch.empty(shape, dtype=dtype, device="meta"), requires_grad=False)
            if precision == "int8":
                self.scale = nn.Parameter(torch.empty(shape[0], device="meta"), requires_grad=False)
        self._stash: tuple[torch.Tensor, torch.Tensor] | None = None

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        if self.minimum is not None:
            assert self.scale is not None, "a q4 matrix has its scale beside its minimum"
            return q4.linear(x, self.weight, self.scale, self.minimum, self.bias, sum(self.sizes), blocked=True)
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


def _q4_parameters(in_features: int, out_features: int) -> tuple[nn.Parameter, nn.Parameter, nn.Parameter]:
    module = Q4Linear(in_features, out_features, bias=False, blocked=True)
    return module.weight, module.scale, module.minimum


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
    # a quantized weight's twin name -> the names of the arrays that come with it (int8: its scale; q4: its
    # scale and minimum)
    companions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    precision: str = "fp32"

    def clear(self) -> None:
        for f in self.fused:
            f.clear()


def build_twin(model: PreTrainedModel, fuse: bool, weights: str = "fp32") -> Twin:
    """A meta-device copy of `model` using our attention, with projections fused if asked, and every linear
    layer (the output head too) int8 or 4-bit if `weights` asks. Embeddings, norms and biases stay fp32."""
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
                owner = FusedLinear([getattr(module, n) for n in names], weights)
                setattr(module, fused_name, owner)
                for i, n in enumerate(names):
                    setattr(module, n, FusedPart(owner, i))
                prefix = f"{path}." if path else ""
                sources[f"{prefix}{fused_name}.weight"] = [f"{prefix}{n}.weight" for n in names]
                if owner.bias is not None:
                    sources[f"{prefix}{fused_name}.bias"] = [f"{prefix}{n}.bias" for n in names]
                fused.append(owner)
    if weights in ("int8", "q4"):
        _quantized_linears(twin, weights, blocked=fuse)
    companions = _companions(twin)
    taken = {n for names in companions.values() for n in names}
    for name in state_names(twin):
        if name not in taken:
            sources.setdefault(name, [name])
    return Twin(twin, sources, fused, companions, weights)


def _companions(twin: nn.Module) -> dict[str, tuple[str, ...]]:
    """Each quantized weight's name -> its scale's (and minimum's) names."""
    companions = {}
    for path, module in twin.named_modules(remove_duplicate=False):
        extra = [n for n in ("scale", "minimum") if getattr(module, n, None) is not None]
        if isinstance(module, (Int8Linear, Q4Linear, FusedLinear)) and extra:
            companions[f"{path}.weight"] = tuple(f"{path}.{n}" for n in extra)
    return companions


def _quantized_linears(twin: nn.Module, weights: str, blocked: bool) -> None:
    """Every nn.Linear becomes an Int8Linear or a Q4Linear of the same shape (a mesh splits rows itself: not
    blocked). With q4 the output head stays int8, as GGUF's Q4 files keep it at 8 bits: the head is the one
    matrix the bundled file does not store at 4 bits, and at 4 bits it alone costs most of q4's KL from fp32."""
    head = twin.get_output_embeddings()  # type: ignore[operator]
    for module in list(twin.modules()):
        for child_name, child in list(module.named_children()):
            if (type(child) is not nn.Linear and not isinstance(child, FusedLinear)) or child is head:
                if child is head and type(child) is nn.Linear:
                    setattr(module, child_name, Int8Linear(child.in_features, child.out_features,
                                                           child.bias is not None, blocked))
                continue
            why = q4.check_shape(int(child.weight.shape[-1])) if weights == "q4" else None
            if why is not None:
                raise PlaygroundError(f"weights=q4 cannot run on this model: {why} (layer {child_name}); use int8 "
                                      "or fp32 weights")
            if type(child) is nn.Linear:
                kind = Q4Linear if weights == "q4" else Int8Linear
                setattr(module, child_name, kind(child.in_features, child.out_features, child.bias is not None,
                                                 blocked))


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
    output head quantized is not the fp32 embedding it is tied to)."""
    return (name in twin.companions, *((p.data_ptr(), tuple(p.shape), p.dtype) for p in parts))


def is_q4(twin: Twin, name: str) -> bool:
    """A 4-bit weight comes with a scale and a minimum; an int8 one with its scale only."""
    return len(twin.companions.get(name, ())) == 2


def quantized_arrays(twin: Twin, name: str, parts: list[torch.Tensor]) -> tuple[np.ndarray, ...]:
    """A quantized weight's arrays (the weight, then its companions) from its fp32 source tensors, quantized
    once (int8_store.py keeps them on disk)."""
    host = np.concatenate([_to_numpy(p) for p in parts])
    return int8_store.quantized_q4(host) if is_q4(twin, name) else int8_store.quantized(host)


def quantized_sizes(twin: Twin, name: str, parts: list[torch.Tensor]) -> list[tuple[int, int]]:
    """(bytes, ndim) of each of a quantized weight's arrays, as quantized_arrays() makes them, without making
    them: int8 a byte a weight and an fp32 scale a row; q4 half a byte a weight (rows padded to even) and an fp32
    scale and minimum a group of 32."""
    rows, columns = sum(p.shape[0] for p in parts), parts[0].shape[1]
    if is_q4(twin, name):
        padded = rows + rows % 2
        groups = padded * (columns // q4.GROUP) * 4
        return [(padded // 2 * columns, 2), (groups, 2), (groups, 2)]
    return [(rows * columns, 2), (rows * 4, 1)]


def jax_weights(model: nn.Module, twin: Twin, place: Any = None) -> dict[str, jax.Array]:
    """The twin's named weights as JAX arrays; tensors shared in the model (tied) stay one array. A quantized
    weight and its companions come from the model's fp32 tensor (quantized_arrays).

    `place(name, array)` puts an array on its devices (sharding); default: the default device.
    """
    tensors = model_tensors(model)
    by_source: dict[tuple, Any] = {}
    weights: dict[str, jax.Array] = {}
    for name, source_names in twin.sources.items():
        parts = [tensors[s] for s in source_names]
        names = (name, *twin.companions.get(name, ()))
        key = source_key(twin, name, parts)
        if key not in by_source:
            if len(names) == 1:
                by_source[key] = (_placed(name, parts, place),)
            else:
                put = place or (lambda _, host: jnp.asarray(host))
                arrays = quantized_arrays(twin, name, parts)
                by_source[key] = tuple(put(n, a) for n, a in zip(names, arrays, strict=True))
        weights.update(zip(names, by_source[key], strict=True))
    return weights


def weight_bytes(weights: dict[str, jax.Array]) -> int:
    """Bytes of distinct weight arrays (tied ones once), as they sit on the devices."""
    return sum(int(a.nbytes) for a in {id(a): a for a in weights.values()}.values())

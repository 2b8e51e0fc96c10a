"""4-bit weights for the JAX path: groups of 32 weights along a row share an fp32 scale and minimum (Q4_1's
form: w = scale * q + minimum, q in 0..15), two weights a byte, unpacked inside the jitted product.

How the bytes are laid out decides the speed, because XLA's CPU backend fuses the unpacking into the
matrix-vector product but runs what it fuses element by element: a `jnp.uint4` array, or two neighbouring
weights in a byte, cost an index computation per weight and ran several times slower than fp32 (the forms and
their times: docs/jax-path.md; python -m playground.tools.bench_matmul measures them here). What runs fast is
pairing whole rows: byte (r, k) holds row r's weight k in its low nibble and row r + N/2's in its high one, so
the product is two ordinary products over the same bytes (`packed & 15` and `packed >> 4`, each converted,
scaled and offset inside its fusion, exactly the int8 conversion's shape) and the second reads bytes the first
just brought into the cache.

As with int8, large matrices are multiplied a block of rows at a time inside a loop (int8.product says why: no
converted copy of a matrix is ever hoisted out of the decode loop, and several input rows share one block).
The bundled SmolLM2 file stores its layers as Q4_1 blocks of 32 (a scale and a minimum, the group's minimum and
range over 15): quantizing the fp32 weights it dequantizes to recovers those blocks exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch import nn
from torchax import interop

from playground.backends.jax.engine.int8 import block_rows

GROUP = 32  # weights per scale and minimum along a row (Q4_0/Q4_1's block)
LEVELS = 15  # the largest 4-bit value


def check_shape(columns: int) -> str | None:
    """Why a matrix with rows of this many weights cannot be 4-bit here, or None."""
    if columns % GROUP:
        return f"a row of {columns} weights does not split into groups of {GROUP}"
    return None


def quantize_groups(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(packed (N2/2, K) uint8, scale (N2, K/32), minimum (N2, K/32)) for an fp32 (N, K) matrix, N2 = N rounded
    up to even (a zero row pads an odd one). Each group's minimum maps to 0 and its maximum to 15."""
    n, k = weight.shape
    padded = np.concatenate([weight, np.zeros((n % 2, k), weight.dtype)]) if n % 2 else weight
    groups = padded.reshape(padded.shape[0], k // GROUP, GROUP).astype(np.float32)
    low, high = groups.min(axis=2), groups.max(axis=2)
    scale = (high - low) / LEVELS
    safe = np.where(scale > 0, scale, 1.0)
    q = np.clip(np.rint((groups - low[..., None]) / safe[..., None]), 0, LEVELS).astype(np.uint8)
    q = q.reshape(padded.shape[0], k)
    half = padded.shape[0] // 2
    return (q[:half] | (q[half:] << 4)).astype(np.uint8), scale.astype(np.float32), low.astype(np.float32)


def dequantize_groups(packed: np.ndarray, scale: np.ndarray, minimum: np.ndarray, rows: int) -> np.ndarray:
    """The fp32 (rows, K) matrix the 4-bit one stands for (tests and the torch reference use it)."""
    q = np.concatenate([packed & 0xF, packed >> 4]).astype(np.float32)
    k = q.shape[1]
    w = q.reshape(q.shape[0], k // GROUP, GROUP) * scale[..., None] + minimum[..., None]
    return w.reshape(-1, k)[:rows]


def _half_product(x: jax.Array, nibbles: jax.Array, scale: jax.Array, minimum: jax.Array) -> jax.Array:
    """x (M, K) @ (scale * nibbles + minimum).T for one half's rows (B, K): the conversion fuses into the product."""
    b, k = nibbles.shape
    w = nibbles.astype(x.dtype).reshape(b, k // GROUP, GROUP) * scale[..., None] + minimum[..., None]
    return x @ w.reshape(b, k).T  # (M, B)


def _pair_product(x: jax.Array, packed: jax.Array, scale: jax.Array, minimum: jax.Array) -> jax.Array:
    """Both halves' rows from the same bytes: (M, 2, B)."""
    half = packed.shape[0]
    low = _half_product(x, packed & 0xF, scale[:half], minimum[:half])
    high = _half_product(x, packed >> 4, scale[half:], minimum[half:])
    return jnp.stack([low, high], axis=1)


def product(x: jax.Array, packed: jax.Array, scale: jax.Array, minimum: jax.Array, rows: int,
            blocked: bool = True) -> jax.Array:
    """x (..., K) @ dequantized(packed).T -> (..., rows), a block of packed rows at a time."""
    flat = x.reshape(-1, x.shape[-1])
    half = packed.shape[0]
    block = block_rows(half) if blocked else None
    if block is None:
        pairs = _pair_product(flat, packed, scale, minimum)  # (M, 2, half)
    else:
        count = half // block

        def split(a: jax.Array) -> jax.Array:  # (2 * half, G) -> (count, 2 * block, G): a block's rows of both halves
            return jnp.concatenate([a[:half].reshape(count, block, -1), a[half:].reshape(count, block, -1)], axis=1)

        parts = jax.lax.map(lambda b: _pair_product(flat, *b), (packed.reshape(count, block, -1), split(scale),
                                                                 split(minimum)))  # (count, M, 2, block)
        pairs = jnp.moveaxis(parts, 0, 2)  # (M, 2, count, block)
    out = pairs.reshape(flat.shape[0], 2 * half)[:, :rows]
    return out.reshape(*x.shape[:-1], rows)


class Q4Linear(nn.Module):
    """Stands in for nn.Linear in the traced twin: `weight` is the packed uint8 (N2/2, K), `scale` and `minimum`
    fp32 (N2, K/32)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, blocked: bool) -> None:
        super().__init__()
        self.in_features, self.out_features, self.blocked = in_features, out_features, blocked
        padded = out_features + out_features % 2
        self.weight = nn.Parameter(torch.empty(padded // 2, in_features, dtype=torch.uint8, device="meta"),
                                   requires_grad=False)
        self.scale = nn.Parameter(torch.empty(padded, in_features // GROUP, device="meta"), requires_grad=False)
        self.minimum = nn.Parameter(torch.empty(padded, in_features // GROUP, device="meta"), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, device="meta")) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.scale, self.minimum, self.bias, self.out_features, self.blocked)


def linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor,
           bias: torch.Tensor | None, rows: int, blocked: bool) -> torch.Tensor:
    """The 4-bit product under torchax (the tensors are JAX arrays in torch clothing)."""
    out = interop.call_jax(product, x, weight, scale, minimum, rows, blocked)
    return out if bias is None else out + bias

"""Weight-only int8 for the JAX path: one byte per weight, one fp32 scale per output channel, converted inside
the jitted product.

Decoding one token reads every weight once, so a step's speed limit is bandwidth over bytes per weight. XLA on
CPU fuses an int8 -> fp32 conversion into a one-row matrix-vector product (the weights are read as bytes), but
with several rows (beam search, a verify pass) it writes a converted copy of the whole matrix first. Large
matrices are therefore multiplied a block of weight rows at a time, each block converted once and used by every
input row (playground/tools/bench_matmul.py measures both layouts). The per-channel scale multiplies the
product's output, which is exact: (x @ q.T) * s == x @ (q * s[:, None]).T.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch import nn
from torchax import interop

# the most weight rows converted at a time: of the block sizes measured it was fastest (bench_matmul: 4.1 ms for
# 2 rows of SmolLM2's head, against 4.4 ms for blocks of 1024, 7.1 ms of 256, 6.4 ms fp32, 38 ms converted inline)
BLOCK_ROWS = 4096


def quantize_rows(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 with one scale per output row (the row's absmax maps to 127)."""
    scale = np.maximum(np.abs(weight).max(axis=1), 1e-12) / 127.0
    return np.round(weight / scale[:, None]).astype(np.int8), scale.astype(np.float32)


def dequantize_rows(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The fp32 matrix the int8 one stands for (tests and the torch reference use it)."""
    return q.astype(np.float32) * scale[:, None]


def block_rows(rows: int) -> int | None:
    """Rows per block for a matrix of `rows` output rows: the fewest blocks (two at least) of at most BLOCK_ROWS
    rows that divide the rows evenly; None where none do (then the product is written inline)."""
    for count in range(max(2, -(-rows // BLOCK_ROWS)), rows // 2 + 1):
        if rows % count == 0:
            return rows // count
    return None


def product(x: jax.Array, q: jax.Array, scale: jax.Array, blocked: bool = True) -> jax.Array:
    """x (..., K) @ dequantized(q (N, K)).T -> (..., N), converting one block of weight rows at a time.

    The blocks are a loop on purpose, even for one input row: inside it the input is a loop parameter, so XLA
    fuses only the block's conversion into its product (a vectorised matrix-vector kernel) and never the
    input's producers (a norm, an activation, recomputed per output element), and it cannot hoist the
    conversion of loop-invariant weights out of a decode loop (an fp32 copy of every matrix per call). A mesh
    passes blocked=False: the partitioner splits the rows itself."""
    flat = x.reshape(-1, x.shape[-1])
    block = block_rows(q.shape[0]) if blocked else None
    if block is None:
        out = (flat @ q.T.astype(x.dtype)) * scale
    else:
        blocks = q.reshape(q.shape[0] // block, block, q.shape[1])
        parts = jax.lax.map(lambda b: flat @ b.astype(x.dtype).T, blocks)  # (N // block, M, block)
        out = jnp.moveaxis(parts, 0, 1).reshape(flat.shape[0], q.shape[0]) * scale
    return out.reshape(*x.shape[:-1], q.shape[0])


class Int8Linear(nn.Module):
    """Stands in for nn.Linear in the traced twin: `weight` is int8 (N, K), `scale` fp32 (N,)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, blocked: bool) -> None:
        super().__init__()
        self.in_features, self.out_features, self.blocked = in_features, out_features, blocked
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=torch.int8, device="meta"),
                                   requires_grad=False)
        self.scale = nn.Parameter(torch.empty(out_features, device="meta"), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features, device="meta")) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.scale, self.bias, self.blocked)


def linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
           blocked: bool) -> torch.Tensor:
    """The int8 product under torchax (the tensors are JAX arrays in torch clothing)."""
    out = interop.call_jax(product, x, weight, scale, blocked)
    return out if bias is None else out + bias

"""One weight product of a decoding step, in the layouts the JAX path could use: fp32, bf16, int8 and 4-bit.

Decoding reads every weight once per step, so a step's speed limit is bandwidth over bytes per weight. This
times `x @ W.T` for an (M, K) input, M = the rows a step feeds (1 for greedy, K beams, a verify pass's k + 1),
over an (N, K) weight the shape of SmolLM2's output head by default, and reports each layout's median time
and the read bandwidth it reached. The int8 layouts keep one scale per output row and convert inside the
jitted product; "blocked" converts one block of rows at a time (sized to stay in L2) and multiplies every input
row by it before the next, so no converted copy of the whole matrix is ever written. The 4-bit layouts keep a
scale and a minimum per group of 32 weights (Q4_1's form) and differ in where the two weights of a byte come
from: XLA's native `uint4` array, neighbouring weights of a row, or rows r and r + N/2 (q4.py's layout).

Run: python -m playground.tools.bench_matmul [--rows 1,2,4,8,16] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from playground.backends.jax.engine import q4
from playground.backends.jax.engine.int8 import quantize_rows

HEAD = (49152, 576)  # SmolLM2-135M's tied embedding: the largest matrix a step reads
BLOCKS = (256, 1024, 4096)  # rows of int8 weights converted at a time


def q4_values(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q (N, K) uint8 in 0..15, scale, minimum (N, K / 32)): q4.py's quantization before its packing."""
    packed, scale, minimum = q4.quantize_groups(weight)
    q = np.concatenate([packed & 0xF, packed >> 4])[: weight.shape[0]]
    return q, scale[: weight.shape[0]], minimum[: weight.shape[0]]


def _grouped(q: jax.Array, scale: jax.Array, minimum: jax.Array) -> jax.Array:
    n, k = q.shape
    return (q.astype(jnp.float32).reshape(n, k // q4.GROUP, q4.GROUP) * scale[..., None]
            + minimum[..., None]).reshape(n, k)


def fp32(x: jax.Array, weight: jax.Array) -> jax.Array:
    return x @ weight.T


def bf16(x: jax.Array, weight: jax.Array) -> jax.Array:
    return jnp.dot(x.astype(jnp.bfloat16), weight.T, preferred_element_type=jnp.float32)


def int8(x: jax.Array, q: jax.Array, scale: jax.Array) -> jax.Array:
    """The conversion written inline: XLA fuses it into a one-row product; with more rows it may not."""
    return (x @ q.T.astype(jnp.float32)) * scale


def int8_rows(x: jax.Array, q: jax.Array, scale: jax.Array) -> jax.Array:
    """One matrix-vector product per input row: every row reads (and converts) the whole matrix again."""
    return jax.lax.map(lambda row: (row[None] @ q.T.astype(jnp.float32))[0], x) * scale


def q4_grouped(x: jax.Array, q: jax.Array, scale: jax.Array, minimum: jax.Array) -> jax.Array:
    """An (N, K) array of 4-bit values converted, scaled and offset inside the product: as `jnp.uint4` (XLA
    packs it two a byte), or a byte each (what the group scale and minimum cost without any unpacking)."""
    return x @ _grouped(q, scale, minimum).T


def q4_neighbours(x: jax.Array, packed: jax.Array, scale: jax.Array, minimum: jax.Array) -> jax.Array:
    """Weights 2j and 2j + 1 of a row in one byte, shifted apart and interleaved inside the product."""
    n, half = packed.shape
    return x @ _grouped(jnp.stack([packed & 0xF, packed >> 4], axis=-1).reshape(n, 2 * half), scale, minimum).T


def bf16_blocked(x: jax.Array, weight: jax.Array, *, block: int) -> jax.Array:
    """Blocks of `block` bf16 weight rows, each converted once and multiplied by all input rows."""
    n, k = weight.shape
    out = jax.lax.map(lambda b: x @ b.astype(jnp.float32).T, weight.reshape(n // block, block, k))
    return jnp.moveaxis(out, 0, 1).reshape(x.shape[0], n)


def int8_blocked(x: jax.Array, q: jax.Array, scale: jax.Array, *, block: int) -> jax.Array:
    """Blocks of `block` weight rows, each converted once and multiplied by all input rows."""
    n, k = q.shape
    blocks = q.reshape(n // block, block, k)
    out = jax.lax.map(lambda b: x @ b.astype(jnp.float32).T, blocks)  # (n // block, M, block)
    return jnp.moveaxis(out, 0, 1).reshape(x.shape[0], n) * scale


def median_ms(fn: Callable[..., jax.Array], *args: jax.Array, repeats: int) -> float:
    """Median wall time of a compiled call, after one warm call (compile) and one more."""
    compiled = jax.jit(fn).lower(*args).compile()
    for _ in range(2):
        compiled(*args).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compiled(*args).block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def layouts(weight: np.ndarray) -> dict[str, tuple[Callable[..., jax.Array], tuple[jax.Array, ...], int]]:
    """name -> (product, weight arguments, bytes of weights it reads)."""
    q, scale = quantize_rows(weight)
    values, group_scale, group_min = (jnp.asarray(a) for a in q4_values(weight))
    pairs = tuple(jnp.asarray(a) for a in q4.quantize_groups(weight))
    neighbours = jnp.asarray((np.asarray(values)[:, 0::2] | (np.asarray(values)[:, 1::2] << 4)).astype(np.uint8))
    q4_bytes = weight.size // 2 + 2 * group_scale.nbytes
    w32, w16 = jnp.asarray(weight), jnp.asarray(weight, jnp.bfloat16)
    q8, s = jnp.asarray(q), jnp.asarray(scale)
    int8_bytes = q.nbytes + scale.nbytes
    found: dict[str, tuple[Callable[..., jax.Array], tuple[jax.Array, ...], int]] = {
        "fp32": (fp32, (w32,), weight.nbytes),
        "bf16": (bf16, (w16,), weight.nbytes // 2),
        "int8": (int8, (q8, s), int8_bytes),
        "int8-rows": (int8_rows, (q8, s), int8_bytes),
        "q4-uint4": (q4_grouped, (values.astype(jnp.uint4), group_scale, group_min), q4_bytes),
        "q4-int8-groups": (q4_grouped, (values, group_scale, group_min), q4_bytes * 2 - weight.size // 2),
        "q4-neighbours": (q4_neighbours, (neighbours, group_scale, group_min), q4_bytes),
        "q4-row-pairs": (partial(q4.product, rows=weight.shape[0], blocked=False), pairs, q4_bytes),
        "q4-row-pairs-blocked": (partial(q4.product, rows=weight.shape[0]), pairs, q4_bytes),
    }
    for block in BLOCKS:
        if weight.shape[0] % block == 0:
            found[f"int8-blocked-{block}"] = (partial(int8_blocked, block=block), (q8, s), int8_bytes)
    if weight.shape[0] % BLOCKS[-1] == 0:  # the block size the JAX path uses for large matrices
        found[f"bf16-blocked-{BLOCKS[-1]}"] = (partial(bf16_blocked, block=BLOCKS[-1]), (w16,), weight.nbytes // 2)
    return found


def measure(rows: list[int], shape: tuple[int, int], repeats: int,
            only: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One record per (layout, M): median ms, GB/s of weights read, and the cost against the same layout's M=1."""
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal(shape) * 0.02).astype(np.float32)
    records = []
    for name, (fn, weights, nbytes) in layouts(weight).items():
        if only and not name.startswith(only):
            continue
        one = None
        for m in rows:
            x = jnp.asarray(rng.standard_normal((m, shape[1])).astype(np.float32))
            ms = median_ms(fn, x, *weights, repeats=repeats)
            one = ms if m == rows[0] else one
            records.append({"layout": name, "rows": m, "ms": round(ms, 3), "gb_per_s": round(nbytes / ms / 1e6, 1),
                            "vs_first_rows": round(ms / one, 2) if one else None})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,2,4,8,11,16", help="input rows M, comma-separated (the first is the base)")
    parser.add_argument("--shape", default=f"{HEAD[0]}x{HEAD[1]}", help="weight shape N x K")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--layouts", default="", help="only layouts whose names start so (e.g. q4,int8)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    shape = tuple(int(v) for v in args.shape.lower().split("x"))
    if len(shape) != 2:
        parser.error(f"--shape must be N x K, got {args.shape!r}")
    only = tuple(p for p in args.layouts.split(",") if p)
    records = measure([int(m) for m in args.rows.split(",")], (shape[0], shape[1]), args.repeats, only)
    if args.json:
        print(json.dumps(records, indent=1))
        return
    print(f"{'layout':<20} {'rows':>4} {'ms':>8} {'GB/s':>7} {'vs first':>8}")
    for r in records:
        print(f"{r['layout']:<20} {r['rows']:>4} {r['ms']:>8.3f} {r['gb_per_s']:>7.1f} {r['vs_first_rows']:>8}")


if __name__ == "__main__":
    main()

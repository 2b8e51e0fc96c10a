"""A stack of decoder-layer weight products, unrolled against scanned: why the JAX path unrolls its layers.

A program that traces every layer compiles longer the more layers a model has; scanning one layer body over
stacked weights (`lax.scan`) would compile one. Decoding is bound by weight reads, though, so a scan is only
worth it if each iteration reads its layer's slice of the stack in place. This times one decoding step's MLP
products (a matrix-vector product up, SiLU, one down, a residual add) over L layers, SmolLM2-135M's shapes by
default, three ways: unrolled (one array per layer, as the engine passes weights), scanned over the stack as
the scan's input, and scanned with the stack indexed by the loop counter. It reports each one's compile time,
median time per call and the read bandwidth reached.

Run: python -m playground.tools.bench_layers [--layers 30] [--hidden 576] [--inner 1536] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def _layer(h: jax.Array, up: jax.Array, down: jax.Array) -> jax.Array:
    return h + down @ jax.nn.silu(up @ h)


def unrolled(h: jax.Array, ups: list[jax.Array], downs: list[jax.Array]) -> jax.Array:
    for up, down in zip(ups, downs, strict=True):
        h = _layer(h, up, down)
    return h


def scanned(h: jax.Array, ups: jax.Array, downs: jax.Array) -> jax.Array:
    """The stacked weights as the scan's input: each iteration gets its layer's slice."""
    return jax.lax.scan(lambda c, w: (_layer(c, *w), None), h, (ups, downs))[0]


def indexed(h: jax.Array, ups: jax.Array, downs: jax.Array) -> jax.Array:
    """The stacks indexed by the loop counter inside the body."""
    return jax.lax.scan(lambda c, i: (_layer(c, ups[i], downs[i]), None), h, jnp.arange(ups.shape[0]))[0]


def _timed(fn: Callable[..., jax.Array], args: tuple, calls: int) -> tuple[float, float, jax.Array]:
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - start
    out = compiled(*args).block_until_ready()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        compiled(*args).block_until_ready()
        times.append(time.perf_counter() - start)
    return compile_s, statistics.median(times), out


def run(layers: int = 30, hidden: int = 576, inner: int = 1536, calls: int = 50) -> dict[str, Any]:
    """Each variant's compile_s, ms per call and GB/s, and the largest difference of its output from unrolled's."""
    key_up, key_down = jax.random.split(jax.random.PRNGKey(0))
    ups = jax.random.normal(key_up, (layers, inner, hidden)) * 0.02
    downs = jax.random.normal(key_down, (layers, hidden, inner)) * 0.02
    h = jnp.ones(hidden)
    weight_bytes = ups.nbytes + downs.nbytes
    variants: dict[str, tuple[Callable[..., jax.Array], tuple]] = {
        "unrolled": (unrolled, (h, list(ups), list(downs))), "scanned": (scanned, (h, ups, downs)),
        "indexed": (indexed, (h, ups, downs))}
    rows, reference = {}, None
    for name, (fn, args) in variants.items():
        compile_s, per_call, out = _timed(fn, args, calls)
        reference = out if reference is None else reference
        rows[name] = {"compile_s": round(compile_s, 3), "ms_per_call": round(per_call * 1e3, 3),
                      "gb_per_s": round(weight_bytes / per_call / 1e9, 1),
                      "max_abs_diff": float(jnp.abs(out - reference).max())}
    return {"layers": layers, "hidden": hidden, "inner": inner, "weight_bytes": int(weight_bytes), "variants": rows,
            "scanned_vs_unrolled": round(rows["scanned"]["ms_per_call"] / rows["unrolled"]["ms_per_call"], 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--inner", type=int, default=1536)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run(args.layers, args.hidden, args.inner, args.calls)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.layers} layers, MLP {args.hidden} -> {args.inner} -> {args.hidden}, "
          f"{report['weight_bytes'] / 1e6:.0f} MB of weights per call")
    print(f"{'variant':10} {'compile s':>9} {'ms/call':>8} {'GB/s':>6}")
    for name, row in report["variants"].items():
        print(f"{name:10} {row['compile_s']:9.3f} {row['ms_per_call']:8.2f} {row['gb_per_s']:6.1f}")
    print(f"scanned / unrolled time per call: {report['scanned_vs_unrolled']}x")


if __name__ == "__main__":
    main()

"""Where a warm JAX run from the prefix store parts from the cold run of the same prompt, key by key.

On SmolLM2 (the bundled model), Hamlet's first N tokens are prefilled into an entry as a first run would keep
them; then the first N + 32 tokens are prefilled cold, and the entry is continued over the 32 by the resume
program, as a warm run does. Per layer, the script counts the stored keys and values that differ bit for bit:
the N kept positions (entry against cold) and the 32 suffix positions (warm against cold), and gives the largest
gap in the last position's next-token probabilities. Then it forces the cold run's geometry on the warm one (the
entry prefilled over a ring as long as the cold prefill's, the suffix padded to a whole prefill chunk; N a whole
number of chunks) and counts again: where the counts fall to 0, the gap was the programs' shapes. docs/caches.md
gives the figures.

    .venv/bin/python scripts/jax_reuse_gap.py --kept 512 --store bf16
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.backends.jax import prefix_reuse  # noqa: E402
from playground.backends.jax.caches.plan import Layouts, plan_cache, prefill_bucket  # noqa: E402
from playground.backends.jax.caches.pytree import JaxCache  # noqa: E402
from playground.backends.jax.engine import prefill as chunked  # noqa: E402
from playground.backends.jax.engine.engine import Engine, engine_for  # noqa: E402
from playground.backends.jax.strategy import STEPS_PER_CALL  # noqa: E402
from playground.backends.prefix_store import Match  # noqa: E402
from playground.data.text_files import DEFAULT_TEXT  # noqa: E402
from playground.models.loaded import LOADED  # noqa: E402
from playground.spec import RunSpec  # noqa: E402

SUFFIX = 32


def prefilled(engine: Engine, spec: RunSpec, ids: list[int], new: int, slots: int = 0) -> tuple[np.ndarray, JaxCache]:
    """`ids` through the prefill program a run of `new` tokens asks for (its first layouts; `slots`: laid out that
    long instead): the last logits and the cache."""
    layouts = plan_cache(spec.replace(max_new_tokens=new), engine.config, len(ids), STEPS_PER_CALL).schedule()[0]
    if slots:
        layouts = tuple(layout.resized(slots) for layout in layouts)
    padded = np.zeros((1, prefill_bucket(len(ids))), np.int32)
    padded[0, : len(ids)] = ids
    logits, cache = engine.prefill_program(padded.shape[1], layouts).result()(
        engine.weights, engine.put(padded), engine.put(np.int32(len(ids))))
    return np.asarray(logits), cache


def differing(a: JaxCache, b: JaxCache, start: int, stop: int) -> list[int]:
    """Per layer, the stored keys and values at positions [start, stop) that differ bit for bit."""
    return [sum(int((np.asarray(x[0, :, start:stop]) != np.asarray(y[0, :, start:stop])).sum())
                for x, y in zip(la.arrays.values(), lb.arrays.values(), strict=True))
            for la, lb in zip(a.jax_layers, b.jax_layers, strict=True)]


def p_gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(jnp.abs(jax.nn.softmax(jnp.asarray(a[0])) - jax.nn.softmax(jnp.asarray(b[0]))).max())


def resumed(engine: Engine, match: Match, ids: list[int], layouts: Layouts, bucket: int = 0,
            work: int = 0) -> tuple[np.ndarray, JaxCache]:
    """The entry continued over `ids` past the match: by the resume program a warm run runs, or with the suffix
    padded to `bucket` over a working ring of `work` slots."""
    if not bucket:
        program = prefix_reuse.resume_program(engine, match, len(ids), layouts).result()
        logits, cache = prefix_reuse.run_resume(engine, program, match, np.asarray([ids], np.int32))
        return np.asarray(logits), cache
    program = prefix_reuse._program(engine, match.entry.snapshot.layouts, bucket, work, layouts).result()  # noqa: SLF001
    padded = np.zeros((1, bucket), np.int32)
    padded[0, : len(ids) - match.shared] = ids[match.shared:]
    logits, cache = program(engine.weights, match.entry.snapshot, engine.put(padded),
                            engine.put(np.int32(match.shared)), engine.put(np.int32(len(ids) - match.shared)))
    return np.asarray(logits), cache


def line(name: str, counts: list[int], gap: float | None = None) -> str:
    layers = sum(count > 0 for count in counts)
    text = f"  {name}: {layers}/{len(counts)} layers differ; layer 0, 1, 2, last: {counts[0]}, {counts[1]}, " \
           f"{counts[2]}, {counts[-1]}"
    return text if gap is None else f"{text}; last position's p within {gap:.2e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kept", type=int, default=512, help="tokens the entry keeps (N)")
    parser.add_argument("--store", choices=("bf16", "fp32"), default="bf16", help="cache_dtype")
    args = parser.parse_args()
    loaded, _ = LOADED.get("smollm2-135m", "fp32")
    engine, _ = engine_for(loaded.model, 1, "fp32")
    text = loaded.tokenizer(DEFAULT_TEXT.read_text()).input_ids
    kept, whole = text[: args.kept], text[: args.kept + SUFFIX]
    spec = RunSpec.from_dict({"model": "smollm2-135m", "backend": "jax", "cache": "dynamic",
                              "cache_dtype": args.store, "max_new_tokens": 8, "chat": False})
    layouts = plan_cache(spec, engine.config, len(whole), STEPS_PER_CALL).schedule()[0]
    cold_logits, cold = prefilled(engine, spec, whole, 8)
    bucket = prefill_bucket(len(whole))
    ring = max(layouts[0].slots, bucket)  # the ring the cold prefill's chunks attend over (prefill.staging)
    elements = 2 * int(np.prod(cold.jax_layers[0].arrays["keys"][0, :, :1].shape))
    print(f"SmolLM2, {args.store} store, {args.kept} kept + {SUFFIX} tokens: cold bucket {bucket}, its chunks over "
          f"a ring of {ring}; {elements * args.kept} kept and {elements * SUFFIX} suffix values per layer")
    for label, slots, forced in (("as a warm run runs", 0, False), ("in the cold run's geometry", ring, True)):
        _, entry_cache = prefilled(engine, spec, kept, 1, slots)
        entry = prefix_reuse.snapshot(entry_cache, kept)
        assert entry is not None
        match = Match(entry, args.kept)
        chunk = min(bucket, chunked.chunk_tokens())
        logits, warm = resumed(engine, match, whole, layouts, chunk if forced else 0, ring if forced else 0)
        print(f" {label}:")
        print(line("kept positions, entry against cold", differing(entry.snapshot, cold, 0, args.kept)))
        suffix = differing(warm, cold, args.kept, len(whole))
        print(line("suffix, warm against cold", suffix, p_gap(logits, cold_logits)))


if __name__ == "__main__":
    main()

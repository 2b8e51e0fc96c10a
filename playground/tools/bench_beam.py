"""Beam search in the benchmark: 4 beams on each backend, timed over whole runs.

Beam search streams nothing while it runs (no hypothesis is final until the search ends), so its rate is the
returned sequence's new tokens over the whole call, prefill included, on both backends alike; min_new_tokens
pins the length. Like every benchmark configuration: one warm-up call (the JAX one reports its compile_s), then
ROUNDS timed calls, each after a bandwidth sample, and medians.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Protocol

from playground.models.loaded import LoadedModel
from playground.runner import backend_for
from playground.spec import RunSpec

BEAMS = 4


class Probe(Protocol):
    def sample(self) -> float: ...


def bench_beam(loaded: LoadedModel, ids: list[int], new_tokens: int, backend: str, probe: Probe,
               rounds: int) -> dict[str, Any]:
    """`{backend}-beam4`: whole-run tokens/s (median of `rounds`), compile_s of the cold call."""
    generate = backend_for(backend).generate
    spec = RunSpec(model=loaded.name, backend=backend, strategy="beam", num_beams=BEAMS, cache="static",
                   max_new_tokens=new_tokens, min_new_tokens=new_tokens)

    def run_once() -> tuple[float, float]:
        start = time.perf_counter()
        out = generate(loaded, ids, spec, lambda _: None, lambda: False)
        seconds = time.perf_counter() - start - out.compile_s
        return len(out.sequences[0]) / seconds, out.compile_s

    _, compile_s = run_once()
    speeds = []
    for _ in range(rounds):
        probe.sample()
        speeds.append(run_once()[0])
    return {"name": f"{backend}-beam{BEAMS}", "tokens_per_s": statistics.median(speeds), "ttft_s": None,
            "compile_s": round(compile_s, 3) if backend == "jax" else 0.0}

"""One JAX run of a tiny Llama per bounded or quantized cache: compile times and tokens (test_jax_caches' restart
test; run it twice with the same PLAYGROUND_CACHE)."""

import json
from typing import Any

import torch

from playground.backends.jax import decoder as jax_decoder
from playground.spec import RunSpec
from tests.helpers import tiny_llama, tiny_loaded, tiny_programs_at_o0


def main() -> None:
    tiny_programs_at_o0()
    loaded = tiny_loaded("tiny", tiny_llama())
    torch.seed()  # as in a served process, torch's seed differs from one process to the next
    report = {}
    runs: tuple[dict[str, Any], ...] = (dict(cache="sliding", window=8), dict(cache="sink", window=8, sink_tokens=2),
                                        dict(cache="quantized", cache_bits=4, residual_length=8))
    for knobs in runs:
        spec = RunSpec(backend="jax", max_new_tokens=24, min_new_tokens=24, **knobs)
        out = jax_decoder.generate(loaded, [5, 17, 42], spec, lambda c: None, lambda: False)
        report[str(knobs)] = {"compile_s": out.compile_s, "tokens": out.sequences[0]}
    print(json.dumps(report))


if __name__ == "__main__":
    main()

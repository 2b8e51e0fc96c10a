"""JAX beam search on 1 and 2 devices, static and sliding caches: sequences, scores, and whether the beams'
caches were split (test_jax_beam). Needs XLA_FLAGS=--xla_force_host_platform_device_count=2 (or more)."""

import json
from typing import Any

import torch

from playground.backends.jax import decoder as jax_decoder
from playground.spec import RunSpec
from tests.helpers import tiny_llama, tiny_loaded, tiny_programs_at_o0


def main() -> None:
    tiny_programs_at_o0()
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    loaded = tiny_loaded("llama", tiny_llama(num_key_value_heads=4))  # 4 KV heads: 2 devices split them
    report = {}
    runs: tuple[tuple[str, dict[str, Any]], ...] = (("static", {}), ("sliding", {"window": 8}))
    for cache, knobs in runs:
        for n in (1, 2):
            spec = RunSpec(backend="jax", strategy="beam", num_beams=3, num_return_sequences=2, cache=cache,
                           max_new_tokens=16, min_new_tokens=16, devices=n, **knobs)
            out = jax_decoder.generate(loaded, ids, spec, lambda c: None, lambda: False)
            assert out.scores is not None  # beam search scores its sequences
            report[f"{cache}-{n}"] = {"sequences": out.sequences, "scores": [round(s, 4) for s in out.scores],
                                      "split": out.extra.get("kv_heads", "one device")}
    print(json.dumps(report))


if __name__ == "__main__":
    main()

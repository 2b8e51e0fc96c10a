"""The sliding, sink and quantized JAX caches on 1, 2 and 4 devices, and whether their KV heads were split
(test_jax_caches). Needs XLA_FLAGS=--xla_force_host_platform_device_count=4 (or more) in the environment."""

import json
from typing import Any

import torch

from playground.backends.jax import decoder as jax_decoder
from playground.spec import RunSpec
from tests.helpers import tiny_llama, tiny_loaded, tiny_programs_at_o0


def main() -> None:
    tiny_programs_at_o0()
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    loaded = tiny_loaded("llama", tiny_llama(num_key_value_heads=4))  # 4 KV heads: 2 and 4 devices split them
    runs: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [("sliding", {"window": 8}, ("greedy",)),
            ("sink", {"window": 8, "sink_tokens": 2}, ("greedy", "sampling")),
            ("quantized", {"cache_bits": 4, "residual_length": 8}, ("greedy", "sampling"))]
    report = {}
    for cache, knobs, strategies in runs:
        for strategy in strategies:
            for n in (1, 2, 4) if strategy == "greedy" else (1, 2):
                spec = RunSpec(backend="jax", cache=cache, strategy=strategy, seed=5, max_new_tokens=32,
                               min_new_tokens=32, devices=n, **knobs)  # 5 + 32 tokens: four windows of 8
                out = jax_decoder.generate(loaded, ids, spec, lambda c: None, lambda: False)
                report[f"{cache}-{strategy}-{n}"] = out.sequences[0]
                report[f"{cache}-{strategy}-{n}-kv-split"] = out.extra.get("kv_heads", "one device")
    print(json.dumps(report))


if __name__ == "__main__":
    main()

"""The JAX decoder on 1, 2 and 4 devices, greedy and sampled, with how q_proj is split (test_jax_decoder).

Needs XLA_FLAGS=--xla_force_host_platform_device_count=4 (or more) in the environment."""

import json
from typing import Any

import torch

from playground.backends.jax import decoder as jax_decoder
from playground.backends.jax import engine as jax_engine
from playground.spec import RunSpec
from tests.helpers import tiny_gemma, tiny_llama, tiny_loaded, tiny_programs_at_o0


def main() -> None:
    tiny_programs_at_o0()
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    report: dict[str, Any] = {}
    for name, model in (("llama", tiny_llama()), ("gemma", tiny_gemma())):
        loaded = tiny_loaded(name, model)
        for n in (1, 2, 4):
            for strategy in ("greedy", "sampling"):
                spec = RunSpec(backend="jax", cache="dynamic", strategy=strategy, seed=5, max_new_tokens=64,
                               min_new_tokens=64, devices=n)  # 5 + 64 tokens: the cache grows 64 -> 128
                out = jax_decoder.generate(loaded, ids, spec, lambda c: None, lambda: False)
                report[f"{name}-{n}-{strategy}"] = out.sequences[0]
            engine, _ = jax_engine.engine_for(model, n)
            q = engine.weights["model.layers.0.self_attn.q_proj.weight" if n > 1 else "model.embed_tokens.weight"]
            report[f"{name}-{n}-shards"] = len({s.device for s in q.addressable_shards})
            report[f"{name}-{n}-shard-rows"] = q.addressable_shards[0].data.shape[0]
    print(json.dumps(report))


if __name__ == "__main__":
    main()

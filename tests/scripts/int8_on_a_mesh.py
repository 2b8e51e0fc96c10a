"""int8 weights on the JAX decoder over 1 and 2 devices: tokens, how a scale is split, the engine's bytes
(test_jax_int8). Needs XLA_FLAGS=--xla_force_host_platform_device_count=2 (or more) in the environment."""

import json
from typing import Any

import torch

from playground.backends.jax import decoder as jax_decoder
from playground.backends.jax import engine as jax_engine
from playground.spec import RunSpec
from tests.helpers import new_device_bytes, tiny_llama, tiny_loaded, tiny_programs_at_o0


def main() -> None:
    tiny_programs_at_o0()
    ids = torch.tensor([[5, 17, 42, 99, 3, 5, 17, 42, 99, 3]])
    model = tiny_llama()
    loaded = tiny_loaded("tiny-llama", model)
    report: dict[str, Any] = {}
    for strategy, devices, lookup in (("greedy", 1, 0), ("greedy", 2, 0), ("assisted", 2, 3)):
        spec = RunSpec(backend="jax", cache="static", weights="int8", strategy=strategy, max_new_tokens=24,
                       min_new_tokens=24, devices=devices, prompt_lookup=lookup)
        report[f"{strategy}-{devices}"] = jax_decoder.generate(loaded, ids, spec, lambda c: None,
                                                               lambda: False).sequences[0]
    engine, _ = jax_engine.engine_for(model, 2, "int8")
    scale = engine.weights["model.layers.0.self_attn.q_proj.scale"]
    report["q-rows"] = scale.shape[0]
    report["q-scale-shard-rows"] = scale.addressable_shards[0].data.shape[0]
    report["estimate"] = jax_engine.device_bytes(model, 2, "int8")
    report["measured"] = new_device_bytes(engine, model)
    print(json.dumps(report))


if __name__ == "__main__":
    main()

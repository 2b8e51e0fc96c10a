"""The JAX engine's device-bytes estimate against what it allocates, on 2 and 4 devices (test_budget).

Needs XLA_FLAGS=--xla_force_host_platform_device_count=4 (or more) in the environment."""

import json

from playground.backends.jax import engine as jax_engine
from tests.helpers import new_device_bytes, tiny_llama


def main() -> None:
    model = tiny_llama(num_key_value_heads=1)  # one KV head: k/v cannot split and are replicated
    report = {}
    for n in (2, 4):
        report[n] = [jax_engine.device_bytes(model, n), new_device_bytes(jax_engine.engine_for(model, n)[0], model)]
    print(json.dumps(report))


if __name__ == "__main__":
    main()

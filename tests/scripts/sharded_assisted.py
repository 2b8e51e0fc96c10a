"""JAX assisted decoding (prompt lookup, a draft model, sampled, over a sink cache) with the main model on 1 and
2 devices (test_jax_assisted). Needs XLA_FLAGS=--xla_force_host_platform_device_count=2 (or more)."""

import json

import torch

from playground.backends.jax.backend import JaxBackend
from playground.spec import RunSpec
from tests.helpers import tiny_llama, tiny_loaded, tiny_programs_at_o0


def main() -> None:
    tiny_programs_at_o0()
    main_model, draft = tiny_loaded("m", tiny_llama()), tiny_loaded("d", tiny_llama(seed=5, num_hidden_layers=1))
    ids = torch.tensor([[5, 17, 42, 99, 3, 5, 17, 42, 99, 3, 8, 9]])
    base = RunSpec(backend="jax", cache="dynamic", max_new_tokens=40, min_new_tokens=40)
    report = {}
    for n in (1, 2):
        for name, extra in (("lookup", {"prompt_lookup": 5}), ("draft", {"assistant": "d"}),
                            ("sampled", {"assistant": "d", "assisted_sampling": True, "seed": 4}),
                            ("sink", {"prompt_lookup": 5, "cache": "sink", "window": 16, "sink_tokens": 4})):
            spec = base.replace(strategy="assisted", devices=n, **extra)
            out = JaxBackend().generate(main_model, ids, spec, lambda c: None, lambda: False,
                                        draft if "assistant" in extra else None)
            report[f"{name}-{n}"] = out.sequences[0]
    print(json.dumps(report))


if __name__ == "__main__":
    main()

"""One static-cache JAX run of a tiny Llama: its compile time and tokens (test_jax_decoder's restart test; run it
twice with the same PLAYGROUND_CACHE)."""

import json

import torch

from playground.backends.jax import decoder as jax_decoder
from playground.spec import RunSpec
from tests.helpers import tiny_llama, tiny_loaded, tiny_programs_at_o0


def main() -> None:
    tiny_programs_at_o0()
    spec = RunSpec(backend="jax", cache="static", max_new_tokens=12, min_new_tokens=12)
    loaded = tiny_loaded("tiny", tiny_llama())
    torch.seed()  # as in a served process, torch's seed differs from one process to the next
    out = jax_decoder.generate(loaded, [5, 17, 42], spec,
                               lambda c: None, lambda: False)
    print(json.dumps({"compile_s": out.compile_s, "tokens": out.sequences[0]}))


if __name__ == "__main__":
    main()

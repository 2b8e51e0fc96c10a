"""A mix of JAX request shapes on a tiny Llama under a small program bound, with the on-disk compile cache on:
the bytes kept after each request, then the first request again, whose programs were dropped
(test_program_cache's reload test)."""

import json
import os
from pathlib import Path

from playground.backends.jax import decoder as jax_decoder
from playground.backends.jax.engine import engine as jax_engine
from playground.spec import RunSpec
from tests.helpers import tiny_llama, tiny_loaded

MIX = ({"cache": "static", "max_new_tokens": 12}, {"cache": "static", "max_new_tokens": 80},
       {"cache": "sliding", "window": 8, "max_new_tokens": 12}, {"cache": "quantized", "max_new_tokens": 12},
       {"strategy": "sampling", "max_new_tokens": 12}, {"strategy": "beam", "num_beams": 2, "max_new_tokens": 12})


def generate(loaded, knobs):
    spec = RunSpec.from_dict({"backend": "jax", "chat": False, "min_new_tokens": knobs["max_new_tokens"], **knobs})
    return jax_decoder.generate(loaded, [5, 17, 42], spec, lambda c: None, lambda: False)


def main() -> None:
    loaded = tiny_loaded("tiny", tiny_llama())
    runs = [generate(loaded, knobs) for knobs in MIX]
    engine, _ = jax_engine.engine_for(loaded.model, 1)
    on_disk = sorted(p.name for p in (Path(os.environ["PLAYGROUND_CACHE"]) / "jax").iterdir())
    again = generate(loaded, MIX[0])
    print(json.dumps({
        "bound": engine.programs.bound,
        "kept_bytes": [run.extra["program_cache_bytes"] for run in runs],
        "kept_programs": [run.extra["compiled_programs"] for run in runs],
        "evictions": runs[-1].extra["program_cache_evictions"],
        "first_compile_s": runs[0].compile_s, "first_tokens": runs[0].sequences[0],
        "again_compile_s": again.compile_s, "again_tokens": again.sequences[0],
        "written_by_again": sorted(set(p.name for p in (Path(os.environ["PLAYGROUND_CACHE"]) / "jax").iterdir())
                                   - set(on_disk)),
    }))


if __name__ == "__main__":
    main()

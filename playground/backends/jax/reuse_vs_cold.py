"""How far a warm JAX run on an entry kept whole (restored_reuse.py) is from the cold run of the same tokens, as
the PyTorch path measures it (backends/torch/reuse_vs_cold.py): the model's next-token distribution at each new
token, once from the entry continued over the suffix (the run's resume program, into a cache laid out with room for
the run's tokens) and once from the whole prompt prefilled, each then stepping through the run's own tokens one at
a time with the teacher-forced scan (teacher_forced.py). Until the first token where the two disagree on the most
likely token, the cold side is what a cold greedy run computes. Measured after the run, outside its timings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from playground.backends.jax import prefix_reuse, restored_reuse
from playground.backends.jax.caches.plan import plan_cache
from playground.backends.jax.engine.engine import engine_for
from playground.backends.jax.teacher_forced import logprobs_along, scan_logprobs
from playground.backends.prefix_store import Match
from playground.backends.warm_vs_cold import compare
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec


def vs_cold(loaded: LoadedModel, spec: RunSpec, match: Match, prompt_ids: list[int],
            tokens: list[int]) -> dict[str, Any] | None:
    """None for an entry of full-precision global rings (not measured: their tests hold warm to cold within 1e-5).
    Else the warm run's next-token distributions (the entry continued over the suffix, then the run's tokens one
    at a time) against the cold run's (the whole prompt prefilled, then the same tokens), at each new token. The
    bf16 store is measured too: the suffix runs in another shape than the cold prefill's chunk (and a long entry's
    chunks over another ring), and the store rounds a few of those last-bit differences a bf16 step apart, which
    spread: on SmolLM2 p within 4.4e-3, the same tokens (docs/caches.md)."""
    measured = restored_reuse.restored(match.entry.snapshot.layouts) or spec.cache_dtype == "bf16"
    if not tokens or not measured:
        return None
    engine, _ = engine_for(loaded.model, spec.devices, spec.weights)
    padded_count = 1 << max(0, len(tokens) - 2).bit_length()  # as logprobs_along pads its scan
    plan = plan_cache(spec.replace(max_new_tokens=max(spec.max_new_tokens, padded_count + 1)), engine.config,
                      len(prompt_ids), 1)
    layouts = plan.at(plan.lengths[-1])
    program = prefix_reuse.resume_program(engine, match, len(prompt_ids), layouts)
    first, cache = prefix_reuse.run_resume(engine, program, match, np.asarray([prompt_ids], np.int32))
    warm = scan_logprobs(engine, np.asarray(first), cache, len(prompt_ids), tokens)
    cold = logprobs_along(loaded, spec, prompt_ids, tokens)
    return compare(warm.numpy(), cold.numpy())

"""What every JAX request does before decoding: fetch (or compile) its programs, timed, and run its prompt.

Plain decoding (decoder.py) and assisted decoding (assisted.py) share it: the same prefill and first-token
programs, so a prompt gives the same first token and cache on both.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from playground.backends.jax import sampling
from playground.backends.jax.engine import DecodeState, Engine
from playground.backends.jax.sampling import Knobs, StepInfo
from playground.spec import RunSpec


class Compiled:
    """A request's programs, fetched before the prompt runs: a cold request's compile shows in its TTFT and in
    compile_s, never inside its decode rate."""

    prefill: Any
    first: Any

    def __init__(self) -> None:
        self.compile_s = 0.0

    def _add(self, compiled: tuple[Any, float]) -> Any:
        program, seconds = compiled
        self.compile_s += seconds
        return program


def run_prompt(engine: Engine, programs: Compiled, prompt: np.ndarray, bucket: int,
               spec: RunSpec) -> tuple[DecodeState[jax.Array], Knobs[jax.Array], int, StepInfo]:
    """The prompt (B, T) padded on the right to `bucket` (causal masking keeps the padding out of the real
    tokens) into a new cache; returns the decode state, the knobs on the device, and the first new token and
    its StepInfo on the host."""
    padded = np.zeros((prompt.shape[0], bucket), np.int32)
    padded[:, : prompt.shape[1]] = prompt
    ids, true_len = engine.put(padded), engine.put(np.int32(prompt.shape[1]))
    knobs = engine.put(sampling.knobs_for(spec))
    logits, cache = programs.prefill(engine.weights, ids, true_len)
    state, info = programs.first(logits, ids, true_len, engine.put(jax.random.PRNGKey(spec.seed)), knobs, cache)
    first, info = jax.device_get((state.token, info))
    return state, knobs, int(first[0]), info

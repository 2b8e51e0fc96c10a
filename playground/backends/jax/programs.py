"""A request's compiled programs, fetched before its prompt runs, and the prompt run a draft model shares."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import jax
import numpy as np

from playground.backends.jax import prefix_reuse
from playground.backends.jax.caches.plan import Layouts
from playground.backends.jax.chain.token_choice import ChainArgs, StepInfo
from playground.backends.jax.engine import compiling
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.prefix_store import Match
from playground.spec import RunSpec


class Programs:
    """A request's programs, asked for before its prompt runs and all ready before it does (wait): a cold
    request's compile shows in compile_s, never in its TTFT or inside its decode rate."""

    prefill: Pending  # the padded prompt into a new cache
    start: Pending  # the first token (or beam step) from the prefill's logits

    def __init__(self) -> None:
        self.compile_s = 0.0
        self.steps: dict[Hashable, Pending] = {}  # a decode chunk (or verify pass) per cache layouts (and width)
        self.growers: dict[Layouts, Pending] = {}  # a growth step into each layouts but the first
        self.asked: list[Pending] = []  # every program above, and a plug-in's own (a draft model's)

    def add(self, pending: Pending) -> Pending:
        """An Engine.program() answer, to wait for with the rest."""
        self.asked.append(pending)
        return pending

    def wait(self, should_stop: Callable[[], bool], since: float) -> bool:
        """Wait until every program asked for is ready (True) or should_stop() (False: the compiles run on, see
        compiling.py); compile_s is the time from `since` (the first ask) until then, 0.0 if all were kept."""
        ready, self.compile_s = compiling.timed_wait(self.asked, should_stop, since)
        return ready


def start_prompt(engine: Engine, programs: Programs, prompt: np.ndarray, bucket: int, seed: int | jax.Array,
                 args: Any, warm: Match | None = None) -> tuple[Any, Any]:
    """The prompt (B, T) padded on the right to `bucket` (causal masking keeps the padding out of the real
    tokens) into a new cache by the prefill program, then the start program over its outputs (the last logits
    (B, V), or a plug-in's own prefill's): the strategy's state and its first step's record, on the device.
    `warm`: a kept prefix of the prefix store, which the prefill program (then the resume program) continues over
    the rest of the prompt (prefix_reuse.py). `seed`: the run's seed, or the key its first draw starts from."""
    padded = np.zeros((prompt.shape[0], bucket), np.int32)  # (B, bucket)
    padded[:, : prompt.shape[1]] = prompt
    ids, true_len = engine.put(padded), engine.put(np.int32(prompt.shape[1]))
    if warm is not None:
        prefilled, cache = prefix_reuse.run_resume(engine, programs.prefill, warm, prompt)
    else:
        prefilled, cache = programs.prefill(engine.weights, ids, true_len)  # (B, V), or the plug-in's own
    key = jax.random.PRNGKey(seed) if isinstance(seed, int) else seed
    return programs.start(prefilled, ids, true_len, engine.put(key), args, cache)


def run_prompt(engine: Engine, programs: Programs, prompt: np.ndarray, bucket: int, spec: RunSpec,
               arg_values: ChainArgs) -> tuple[Any, ChainArgs, int, StepInfo]:
    """The prompt through the plain kernel's prefill and start (a draft model's); returns the decode state, the
    chain's args (`arg_values`, host) on the device, and the first new token and its StepInfo on the host."""
    args = engine.put(arg_values)
    state, first = start_prompt(engine, programs, prompt, bucket, spec.seed, args)
    first = jax.device_get(first)
    return state, args, int(first.tokens[0]), first.info

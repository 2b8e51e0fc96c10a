"""The contract between the shared JAX request loop (loop.py) and a decoding strategy's plug-in.

The loop owns what every strategy does alike: the engine, the cache plan, fetching programs, the prompt, growing
the cache, the chunked device calls, stopping and streaming. A plug-in brings only its programs (start, step,
grow) and how it reads one call's results on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np

from playground.backends.base import GenerationOutput, PreviewTokens
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.chain import Context
from playground.backends.jax.compiling import Pending
from playground.backends.jax.engine import Engine
from playground.backends.jax.programs import Programs
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec

STEPS_PER_CALL = 8  # steps per device call: the streaming chunk, and the Python overhead divisor


@dataclass
class Request:
    """What a request fixes before it runs: its engine, prompt, cache plan, stop tokens and programs."""

    engine: Engine
    reused: bool  # the engine (its device weights) existed already
    prompt: np.ndarray  # (1, T) the prompt's ids
    bucket: int  # the padded prompt length
    eos: tuple[int, ...]  # sorted: a compile key
    plan: CachePlan  # each layer's layout, and the cache lengths decoding may step through
    programs: Programs
    scalars: dict[int, jax.Array] = field(default_factory=dict)  # small ints on the device, each put once
    preview: PreviewTokens | None = None  # beam search: hears the leading beam after each call

    def scalar(self, value: int) -> jax.Array:
        """`value` as a device int32, put once per request (a chunk size, a draft count)."""
        if value not in self.scalars:
            self.scalars[value] = self.engine.put(np.int32(value))
        return self.scalars[value]


@dataclass
class Run:
    """A request's decoding so far: the device state the next call continues from, and the loop's counts."""

    state: Any  # the plug-in's device state (DecodeState, BeamState)
    knobs: Any  # the plug-in's traced knobs, on the device
    length: int  # the cache's length now
    layouts: Layouts  # the cache's layouts at that length
    produced: int = 0  # new tokens (beam: search steps) so far
    done: bool = False  # an EOS ended it, or the search is over
    stopped: bool = False  # ended by should_stop()
    calls: int = 0  # device calls after the prompt's
    kv_trace: list[int] = field(default_factory=list)  # cache bytes after each token (or step)


@dataclass(frozen=True)
class Advance:
    """What one device call added, as the loop needs it."""

    tokens: list[int]  # to stream through `emit` (empty when the strategy does not stream)
    count: int  # new tokens, or beam steps
    done: bool  # the request is over (EOS, or the search ended)


class Strategy(Protocol):
    """A decoding strategy's part of a JAX request: its programs and how it reads their results."""

    streams: bool  # tokens go to `emit` chunk by chunk; else the best sequence once, when the run ends

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        """Fix the request's static mode (the logits chain's, from `context`: the vocabulary, EOS ids and
        tokenizer); returns the cache plan to decode over and the plug-in's own programs (a draft model's), which
        the request waits for with the rest."""
        ...

    def start_program(self, engine: Engine, bucket: int, layouts: Layouts) -> Pending:
        """The program that takes the prefill's logits to the first token (or beam step) and the device state."""
        ...

    def step_programs(self, engine: Engine, layouts: Layouts) -> dict[Hashable, Pending]:
        """The call programs over one cache layouts, keyed as step() looks them up in Programs.steps."""
        ...

    def grow_program(self, engine: Engine, old: Layouts, new: Layouts) -> Pending:
        """The program copying the device state from the `old` cache layouts into the larger `new` ones."""
        ...

    def knobs(self, engine: Engine) -> Any:
        """The traced knobs on the device."""
        ...

    def start(self, request: Request, logits: jax.Array, ids: jax.Array, true_len: jax.Array, knobs: Any,
              cache: Any) -> tuple[Any, Any]:
        """Runs the start program; returns the device state and the arrays read() needs on the host."""
        ...

    def width(self, request: Request, run: Run, limit: int) -> int:
        """Cache positions the next call may write (the loop grows the cache to fit them first)."""
        ...

    def step(self, request: Request, run: Run, limit: int) -> Any:
        """One call of up to `limit` tokens (or steps): sets run.state; returns the arrays read() needs."""
        ...

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        """A call's results, on the host since `now`, into the plug-in's records."""
        ...

    def stop(self, request: Request, run: Run) -> int:
        """After should_stop(): how many steps still run (0 ends now; beam search takes one more)."""
        ...

    def output(self, request: Request, run: Run, start: float) -> GenerationOutput:
        """The backends' common output, with this strategy's figures."""
        ...


@runtime_checkable
class OwnPrefill(Protocol):
    """A plug-in that reads more of the prompt's forward than its last logits (contrastive search's hidden states,
    DoLa's early layers): its prefill program returns (what start() takes as `logits`, the cache)."""

    def prefill_program(self, engine: Engine, bucket: int, layouts: Layouts) -> Pending:
        ...


StrategyFactory = Callable[[RunSpec, LoadedModel | None], Strategy]  # (spec, draft model) -> a request's plug-in

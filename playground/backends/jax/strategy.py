"""The contract between the shared JAX request loop (loop.py) and a decoding strategy's plug-in.

The loop owns what every strategy does alike: the engine, the cache plan, fetching programs, the prompt, growing
the cache, the chunked device calls, stopping, streaming and the output's common fields. A plug-in brings its
cache plan, its kernel (its device state's start and step functions: kernel.py makes the programs) and how it
reads one call's results on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np

from playground.backends.base import PreviewTokens
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.chain.chain import Context
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.engine.kernel import Kernel
from playground.backends.jax.programs import Programs
from playground.backends.prefix_store import Match
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
    warm: Match | None = None  # the kept cache the prompt continues (prefix_reuse.py); None: prefilled whole

    def scalar(self, value: int) -> jax.Array:
        """`value` as a device int32, put once per request (a chunk size, a draft count)."""
        if value not in self.scalars:
            self.scalars[value] = self.engine.put(np.int32(value))
        return self.scalars[value]


@dataclass
class Run:
    """A request's decoding so far: the device state the next call continues from, and the loop's counts."""

    state: Any  # the plug-in's device state (DecodeState, BeamState)
    args: Any  # the plug-in's traced args, on the device
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
    """A decoding strategy's part of a JAX request: its cache plan, its kernel (kernel.py: the start, step and
    growth programs) and how it reads their results. The loop runs the calls, and builds the output's common
    fields around `outcome()`."""

    streams: bool  # tokens go to `emit` chunk by chunk; else the best sequence once, when the run ends
    kernel: Kernel[Any]  # set by bind()
    # the first token comes from a call of the step program (the start only sets the state up)
    first_token_steps: bool

    def plan(self, config: Any, prompt_len: int) -> CachePlan:
        """The cache this strategy decodes over: what bind() takes and the memory estimate counts."""
        ...

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        """Fix the request's static mode (the logits chain's, from `context`: the vocabulary, EOS ids and
        tokenizer) and its kernel; returns the cache plan to decode over (plan()'s) and the plug-in's own
        programs (a draft model's), which the request waits for with the rest."""
        ...

    @property
    def host_masks(self) -> bool:
        """A constraint's masks come from the host after every token: one step per call."""
        ...

    def args(self, engine: Engine) -> Any:
        """The traced arguments on the device."""
        ...

    def width(self, request: Request, run: Run, limit: int) -> int:
        """Cache positions the next call may write (the loop grows the cache to fit them first)."""
        ...

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        """A call's (records, count, finished) on the host since `now`, into the plug-in's records."""
        ...

    def stop(self, request: Request, run: Run) -> int:
        """After should_stop(): how many steps still run (0 ends now; beam search takes one more)."""
        ...

    def outcome(self, request: Request, run: Run) -> dict[str, Any]:
        """This strategy's GenerationOutput fields (sequences, records, forward passes, ...), `extra` its own
        figures; the loop adds the timing, cache, compile and engine ones."""
        ...


@runtime_checkable
class OwnStep(Protocol):
    """A plug-in whose calls are not its kernel's chunked steps (assisted decoding's verify passes)."""

    def step_programs(self, engine: Engine, layouts: Layouts) -> dict[Hashable, Pending]:
        """The call programs over one cache layouts, keyed as step() looks them up in Programs.steps."""
        ...

    def step(self, request: Request, run: Run, limit: int) -> Any:
        """One call: sets run.state; returns the arrays read() needs."""
        ...


@runtime_checkable
class ReplaysDraws(Protocol):
    """A plug-in that draws from one key chain token by token: a run whose first tokens are forced starts its chain
    where the uninterrupted run holds it after them (token_choice.replayed_key)."""

    def first_key(self, seed: int) -> jax.Array:
        ...


@runtime_checkable
class OwnPrefill(Protocol):
    """A plug-in that reads more of the prompt's forward than its last logits (contrastive search's hidden states,
    DoLa's early layers): its prefill program returns (what start() takes as `logits`, the cache)."""

    def prefill_program(self, engine: Engine, bucket: int, layouts: Layouts) -> Pending:
        ...


StrategyFactory = Callable[[RunSpec, LoadedModel | None], Strategy]  # (spec, draft model) -> a request's plug-in

"""The program kernel: every strategy's start, chunked step and growth programs, built from its step function.

A strategy brings its device state (a dataclass of arrays with its `cache` field), a start function (the prefill's
outputs to the state and the first step's record), a step function `(weights, state, args) -> (state, record)`
and the record rows a chunk starts from. The kernel brings what every strategy did alike:

- the pinned state: on a mesh the cache split by KV heads and every other array replicated, call after call, so
  the next call (compiled for that layout) takes the state as it is; the step programs donate it;
- the chunked `while_loop`: up to `limit` steps per call (k at most, a static shape), ending early once the
  state says it is finished, each step's record written to its row;
- growth: the same state over a larger cache layouts, new slots empty;
- lowering: abstract inputs for `jit(...).lower`, the state's from `jax.eval_shape` of the start function (so no
  strategy writes its state's shapes twice), keyed in the engine's program cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.stages import Lowered

from playground.backends.jax.caches import pytree
from playground.backends.jax.caches.plan import Layouts
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine

State = TypeVar("State")
StartFn = Callable[..., tuple[Any, Any]]  # (prefilled, ids, length, key, args, cache) -> (state, record)
StepFn = Callable[[dict, Any, Any], tuple[Any, Any]]  # (weights, state, args) -> (state, record)


def pinned(engine: Engine, state: State) -> State:
    """The state with its cache split by KV heads and everything else replicated (on a mesh; else as it is)."""
    if engine.mesh is None:
        return state
    replicated = engine.replicated()
    fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}  # type: ignore[arg-type]
    laid = {name: engine.constrain(value) if name == "cache" else
            jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, replicated), value)
            for name, value in fields.items()}
    return dataclasses.replace(state, **laid)  # type: ignore[type-var]


def grown(engine: Engine, state: State, layouts: Layouts) -> State:
    """The same state over a larger cache: its arrays padded with empty slots at the end."""
    return pinned(engine, dataclasses.replace(state, cache=pytree.grown(state.cache, layouts)))  # type: ignore


def chunked(engine: Engine, step: StepFn, finished: Callable[[Any], jax.Array],
            empty: Callable[[int], Any], steps: int) -> Callable[..., tuple[Any, Any, jax.Array]]:
    """`(weights, state, limit, args) -> (state, records, count)`: up to `limit` (<= steps) steps in one call,
    ending early once `finished(state)`; the records' first `count` rows (of `empty(steps)`) are this call's."""

    def call(weights: dict, state: Any, limit: jax.Array, args: Any) -> tuple[Any, Any, jax.Array]:
        def cond(carry: tuple) -> jax.Array:
            i, s, _ = carry
            return (i < limit) & ~finished(s)

        def body(carry: tuple) -> tuple:
            i, s, out = carry
            s, record = step(weights, s, args)
            out = jax.tree.map(lambda rows, row: rows.at[i].set(row), out, record)
            return i + 1, pinned(engine, s), out

        count, state, out = jax.lax.while_loop(cond, body, (jnp.int32(0), state, empty(steps)))
        return state, out, count

    return call


def prompt_inputs(engine: Engine, bucket: int, prefilled: Any = None) -> tuple[Any, ...]:
    """Abstract (prefill outputs, ids, length, PRNG key) of a start program: the prefill's last logits (1, V)
    unless the strategy's own prefill hands over more (`prefilled`)."""
    shape = engine.shape_struct
    if prefilled is None:
        prefilled = shape((1, engine.vocab_size), jnp.float32)
    return prefilled, shape((1, bucket), jnp.int32), shape((), jnp.int32), shape((2,), jnp.uint32)


def abstract(engine: Engine, values: Any) -> Any:
    """Host values (or shape structs) as abstract arguments, laid out as put() lays out the real ones."""
    return jax.tree.map(lambda v: engine.shape_struct(np.shape(v), v.dtype), values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Kernel(Generic[State]):
    """One strategy's programs over one request's prompt bucket.

    `mode` is the static half that shapes the traced programs (it keys them); `shapes` is the part of it that
    fixes the state's shapes (it keys growth, which only copies arrays); `rows` is the batch of the state's cache
    (1, or one per beam), so the start donates the prompt's cache only when the state keeps it as it is."""

    engine: Engine
    name: str  # the registry's name of the strategy the programs run (it keys them, with the mode)
    mode: Hashable
    bucket: int
    start: StartFn
    step: StepFn
    empty: Callable[[int], Any]
    finished: Callable[[Any], jax.Array]
    args: Any  # the traced arguments, abstract (shape structs laid out as put() lays them out)
    rows: int = 1
    prefilled: Any = None  # the prefill's abstract outputs when they are more than the last logits
    start_key: Hashable = None  # what keys the start program, when less than the mode
    shapes: Hashable = None  # what fixes the state's shapes, when less than the mode

    def _start(self, *inputs: Any) -> tuple[Any, Any]:
        state, record = self.start(*inputs)
        return pinned(self.engine, state), record

    def _start_inputs(self, layouts: Layouts) -> tuple[Any, ...]:
        return (*prompt_inputs(self.engine, self.bucket, self.prefilled), self.args,
                self.engine.abstract_cache(layouts, 1))

    def abstract_state(self, layouts: Layouts) -> Any:
        """Shape structs of the state over `layouts`, laid out as the programs leave it: jax.eval_shape of the
        start function, its cache's arrays split and everything else replicated."""
        state, _ = jax.eval_shape(self.start, *self._start_inputs(layouts))
        small = {f.name: abstract(self.engine, getattr(state, f.name)) for f in dataclasses.fields(state)
                 if f.name != "cache"}
        return dataclasses.replace(state, cache=self.engine.abstract_cache(layouts, self.rows), **small)

    def program(self, key: tuple, fn: Callable[..., Any], inputs: Callable[[], Sequence[Any]],
                donate: tuple[str, ...] = (), warm: Callable[[Any], None] | None = None) -> Pending:
        """`fn` jitted and lowered over `inputs()` (made when it compiles), kept in the engine under this
        strategy's name and `key`."""

        def lower() -> Lowered:
            return jax.jit(fn, donate_argnames=donate).lower(*inputs())

        return self.engine.program((self.name, *key), lower, warm)

    def start_program(self, layouts: Layouts) -> Pending:
        """The prefill's outputs to the state and the first step's record."""
        mode = self.mode if self.start_key is None else self.start_key
        donate = ("cache",) if self.rows == 1 else ()  # K rows are new arrays: nothing to donate

        def start(prefilled: Any, ids: jax.Array, length: jax.Array, key: jax.Array, args: Any,
                  cache: Any) -> tuple[Any, Any]:
            return self._start(prefilled, ids, length, key, args, cache)

        return self.program(("start", self.bucket, layouts, mode), start, lambda: self._start_inputs(layouts), donate)

    def step_program(self, layouts: Layouts, steps: int) -> Pending:
        """Up to `steps` steps per call over `layouts`, the state donated."""
        call = chunked(self.engine, self.step, self.finished, self.empty, steps)

        def inputs() -> tuple[Any, ...]:
            return (self.engine.weights, self.abstract_state(layouts), self.engine.shape_struct((), jnp.int32),
                    self.args)

        return self.program(("step", layouts, steps, self.mode), call, inputs, ("state",))

    def grow_program(self, old: Layouts, new: Layouts) -> Pending:
        """The state copied from the `old` cache layouts into the larger `new` ones (new buffers: nothing to
        donate)."""
        shapes = self.mode if self.shapes is None else self.shapes
        return self.program(("grow", old, new, shapes), partial(grown, self.engine, layouts=new),
                            lambda: (self.abstract_state(old),))

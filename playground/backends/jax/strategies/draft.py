"""A draft model on the JAX path: it proposes tokens one jitted loop at a time and follows the main model's
verdicts by moving its own cache position.

The draft shares the main model's vocabulary (same tokenizer, same logits width), so its tokens and
distributions go to the verify pass as device arrays, with no host round trip. Each proposal of k tokens runs
k + 1 steps in one call: the last step writes the k-th draft into the draft's cache, so that when every draft
is kept the cache already holds them all. After the verdict the draft's counters move to the main model's
position (rejected drafts drop out, as in the main cache) and its next input is the main model's own token.
The draft proposes without the repetition penalty and min_new_tokens (the main model applies both when it
verifies), and without a constraint (its mask stage stays all-allowed: the verify pass's own mask rows reject a
draft the grammar forbids): they change which drafts are kept, never the output.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np

from playground import device
from playground.backends.jax.caches.extend import assisted_plan
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.caches.pytree import cache_bytes
from playground.backends.jax.chain import token_choice
from playground.backends.jax.chain.chain import Context
from playground.backends.jax.chain.token_choice import ChainArgs, SamplingMode
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine, engine_for
from playground.backends.jax.engine.kernel import Kernel, chunked
from playground.backends.jax.programs import Programs, run_prompt
from playground.backends.jax.strategies.plain_programs import DecodeState, plain_kernel
from playground.backends.jax.strategies.verify import rolled_back
from playground.models.loaded import LoadedModel
from playground.registry.builtin import DRAFT_CACHE
from playground.spec import RunSpec

FIRST_DRAFTS = 20  # transformers' num_assistant_tokens: where the schedule starts
MAX_DRAFTS = 16  # the verify pass's width - 1 (a static shape): the schedule stops here


def drafter_plan(spec: RunSpec, config: Any, prompt_len: int) -> CachePlan:
    """A draft model's cache, preallocated: it never grows, so its programs are one of each."""
    return assisted_plan(spec.replace(cache=DRAFT_CACHE), config, prompt_len, MAX_DRAFTS + 1)


def next_draft_count(count: int, kept: int) -> int:
    """transformers' "heuristic" schedule: two more after a pass that kept every draft, one fewer otherwise."""
    return min(MAX_DRAFTS, count + 2) if kept == count else max(1, count - 1)


class Proposed(NamedTuple):
    """A draft step's record: its token and, when sampling, the distribution it was drawn from."""

    token: jax.Array  # ()
    probs: jax.Array  # (V,) when sampling, else (1,) unused


def draft_step(engine: Engine, mode: SamplingMode, weights: dict, s: DecodeState[jax.Array],
               args: ChainArgs) -> tuple[DecodeState[jax.Array], Proposed]:
    """One draft token through the chain (the history stays the prompt's: the draft's chain reads none of it)."""
    logits, cache = engine.forward(weights, s.cache, s.token[:, None], s.position[None, None], 1)
    key, chain_key = token_choice.split_for_chain(s.key, mode)
    out = token_choice.processed(logits[:, -1], s.history, s.produced, chain_key, mode, args)
    if mode.greedy:
        token, probs = token_choice.pick(out.applied.cands, True, key), jnp.zeros((1,), jnp.float32)
    else:
        key, draw = jax.random.split(key)
        token, probs = token_choice.pick(out.applied.cands, False, draw), out.final[0]
    return DecodeState(cache, token, s.position + 1, key, s.history, s.done, s.produced + 1), Proposed(token[0], probs)


def _proposals(engine: Engine, mode: SamplingMode, steps: int) -> Proposed:
    return Proposed(jnp.zeros((steps,), jnp.int32), jnp.zeros((steps, 1 if mode.greedy else engine.vocab_size)))


def _never(state: DecodeState[jax.Array]) -> jax.Array:
    """A proposal runs its count of steps: an end token among the drafts is the verify pass's to judge."""
    return jnp.bool_(False)


def propose_program(kernel: Kernel[DecodeState], layouts: Layouts, steps: int) -> Pending:
    """The compiled proposal of up to steps - 1 drafts over a draft model's cache layouts: count + 1 steps of the
    kernel's loop (count < steps), returning the state after them, the drafts (1, steps - 1) and, when sampling,
    the distributions they were drawn from (1, steps - 1, V)."""
    engine, (mode, _) = kernel.engine, cast(tuple[SamplingMode, tuple[int, ...]], kernel.mode)
    call = chunked(engine, partial(draft_step, engine, mode), _never, partial(_proposals, engine, mode), steps)

    def propose(weights: dict, state: DecodeState[jax.Array], count: jax.Array,
                args: ChainArgs) -> tuple[DecodeState[jax.Array], jax.Array, jax.Array | None]:
        state, out, _ = call(weights, state, count + 1, args)
        return state, out.token[None, : steps - 1], None if mode.greedy else out.probs[None, : steps - 1]

    def inputs() -> tuple[Any, ...]:
        return engine.weights, kernel.abstract_state(layouts), engine.shape_struct((), jnp.int32), kernel.args

    return kernel.program(("propose", layouts, steps, mode), propose, inputs, ("state",))


def _local(arrays: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    """The main state's small arrays on the draft's one device (the main model may be split over a mesh)."""
    return tuple(jax.device_put(arrays, device.current().jax_device()))


class Drafter:
    """The draft model's engine, programs and decoding state for one request."""

    def __init__(self, draft: LoadedModel, spec: RunSpec, prompt_len: int, bucket: int, main: Context, *,
                 samples: bool) -> None:
        self.engine, _ = engine_for(draft.model, 1, spec.weights)
        width = MAX_DRAFTS + 1
        plan = drafter_plan(spec, self.engine.config, prompt_len)
        self.layouts: Layouts = plan.at(plan.lengths[0])
        # the main model's chain without what reads the text so far, and without the end-of-text ban: any
        # proposal is verified, and speculative sampling needs only the distribution each draft was drawn from
        context = Context(self.engine.vocab_size, (), draft.tokenizer)
        self.mode, self.arg_values = token_choice.mode_for(spec, context, samples=samples, keep_history=False)
        self.kernel = plain_kernel(self.engine, bucket, self.mode, ())
        self.programs = Programs()
        self.programs.prefill = self.programs.add(self.engine.prefill_program(bucket, self.layouts))
        self.programs.start = self.programs.add(self.kernel.start_program(self.layouts))
        self.propose = self.programs.add(propose_program(self.kernel, self.layouts, width))
        self.catch_up = self.programs.add(self._catch_up_program())
        self.state: Any = None  # DecodeState once started
        self.args: ChainArgs | None = None
        self.counts: dict[int, jax.Array] = {}


    def _catch_up_program(self) -> Pending:
        shape = self.engine.shape_struct

        def catch_up(state: DecodeState[jax.Array], token: jax.Array, position: jax.Array,
                     produced: jax.Array) -> DecodeState[jax.Array]:
            # inside jit, so the counters come out as buffers of their own (the next call donates them)
            return dataclasses.replace(state, cache=rolled_back(state.cache, position), token=token,
                                       position=position, produced=produced)

        def inputs() -> tuple[Any, ...]:
            i32 = shape((), jnp.int32)
            return self.kernel.abstract_state(self.layouts), shape((1,), jnp.int32), i32, i32

        return self.kernel.program(("catch_up", self.layouts, self.mode.needs), catch_up, inputs, ("state",))

    def start(self, prompt: np.ndarray, bucket: int, spec: RunSpec, first: DecodeState[jax.Array]) -> None:
        """The prompt into the draft's cache; its next input is the main model's first token."""
        seeded = spec.replace(seed=(spec.seed + 1) % 2**32)  # its own random stream
        state, self.args, _, _ = run_prompt(self.engine, self.programs, prompt, bucket, seeded, self.arg_values)
        self.state = self.catch_up(state, *_local((first.token, first.position)), state.produced)

    def drafts(self, count: int) -> tuple[jax.Array, jax.Array | None]:
        """`count` drafts (1, MAX_DRAFTS) on the device, and their distributions when sampling."""
        if count not in self.counts:
            self.counts[count] = self.engine.put(np.int32(count))
        self.state, tokens, probs = self.propose(self.engine.weights, self.state, self.counts[count], self.args)
        return tokens, probs

    def follow(self, main: DecodeState[jax.Array]) -> None:
        """After a verdict: the draft's cache cut back to the main model's position, the main model's token next."""
        self.state = self.catch_up(self.state, *_local((main.token, main.position, main.produced)))

    def cache_bytes(self) -> int:
        return cache_bytes(self.state.cache) if self.state is not None else 0

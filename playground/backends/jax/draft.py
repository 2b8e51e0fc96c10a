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
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.stages import Lowered

from playground import device
from playground.backends.jax import sampling
from playground.backends.jax.caches.extend import assisted_plan
from playground.backends.jax.caches.plan import Layouts
from playground.backends.jax.caches.pytree import cache_bytes
from playground.backends.jax.chain import Context
from playground.backends.jax.compiling import Pending
from playground.backends.jax.engine import DecodeState, Engine, engine_for
from playground.backends.jax.programs import Programs, run_prompt
from playground.backends.jax.sampling import Knobs, SamplingMode
from playground.backends.jax.verify import rolled_back
from playground.models.loaded import LoadedModel
from playground.registry.builtin import DRAFT_CACHE
from playground.spec import RunSpec

FIRST_DRAFTS = 20  # transformers' num_assistant_tokens: where the schedule starts
MAX_DRAFTS = 16  # the verify pass's width - 1 (a static shape): the schedule stops here


def next_draft_count(count: int, kept: int) -> int:
    """transformers' "heuristic" schedule: two more after a pass that kept every draft, one fewer otherwise."""
    return min(MAX_DRAFTS, count + 2) if kept == count else max(1, count - 1)


def propose(engine: Engine, weights: dict, state: DecodeState[jax.Array], count: jax.Array, knobs: Knobs,
            *, steps: int, mode: SamplingMode) -> tuple[DecodeState[jax.Array], jax.Array, jax.Array | None]:
    """count + 1 draft steps (count < steps): the state after them, the drafts (1, steps - 1) and, when sampling,
    the distributions they were drawn from (1, steps - 1, V)."""
    def body(carry: tuple) -> tuple:
        i, s, tokens, probs = carry
        logits, cache = engine.forward(weights, s.cache, s.token[:, None], s.position[None, None], 1)
        key, chain_key = sampling.split_for_chain(s.key, mode)
        out = sampling.processed(logits[:, -1], s.history, s.produced, chain_key, mode, knobs)
        if mode.greedy:
            token = sampling.pick(out.applied.cands, True, key)
        else:
            key, draw = jax.random.split(key)
            token = sampling.pick(out.applied.cands, False, draw)
            probs = probs.at[i].set(out.final[0])
        s = DecodeState(cache, token, s.position + 1, key, s.history, s.done, s.produced + 1)
        return i + 1, engine.pin(s), tokens.at[i].set(token[0]), probs

    probs = jnp.zeros((steps, 1 if mode.greedy else engine.vocab_size), jnp.float32)
    start = (jnp.int32(0), state, jnp.zeros((steps,), jnp.int32), probs)
    _, state, tokens, probs = jax.lax.while_loop(lambda c: c[0] <= count, body, start)
    return state, tokens[None, : steps - 1], None if mode.greedy else probs[None, : steps - 1]


def propose_program(engine: Engine, layouts: Layouts, steps: int, mode: SamplingMode) -> Pending:
    """The compiled proposal of up to steps - 1 drafts over a draft model's cache layouts."""
    def lower() -> Lowered:
        fn = jax.jit(partial(propose, engine, steps=steps, mode=mode), donate_argnames=("state",))
        return fn.lower(engine.weights, engine.abstract_state(layouts, mode, 1), engine.shape_struct((), jnp.int32),
                        engine.knob_specs(mode))

    return engine.program(("propose", layouts, steps, mode), lower)


def _local(arrays: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    """The main state's small arrays on the draft's one device (the main model may be split over a mesh)."""
    return tuple(jax.device_put(arrays, device.current().jax_device()))


class Drafter:
    """The draft model's engine, programs and decoding state for one request."""

    def __init__(self, draft: LoadedModel, spec: RunSpec, prompt_len: int, bucket: int, main: Context, *,
                 samples: bool) -> None:
        self.engine, _ = engine_for(draft.model, 1, spec.weights)
        width = MAX_DRAFTS + 1
        # preallocated: the draft's cache never grows, so its programs are one of each
        plan = assisted_plan(spec.replace(cache=DRAFT_CACHE), self.engine.config, prompt_len, width)
        self.layouts: Layouts = plan.at(plan.lengths[0])
        # the main model's chain without what reads the text so far, and without the end-of-text ban: any
        # proposal is verified, and speculative sampling needs only the distribution each draft was drawn from
        context = Context(self.engine.vocab_size, (), draft.tokenizer)
        self.mode, self.knob_values = sampling.mode_for(spec, context, samples=samples, keep_history=False)
        self.programs = Programs()
        self.programs.prefill = self.programs.add(self.engine.prefill_program(bucket, self.layouts))
        self.programs.start = self.programs.add(self.engine.start_program(bucket, self.layouts, self.mode, ()))
        self.propose = self.programs.add(propose_program(self.engine, self.layouts, width, self.mode))
        self.catch_up = self.programs.add(self._catch_up_program())
        self.state: Any = None  # DecodeState once started
        self.knobs: Knobs | None = None
        self.counts: dict[int, jax.Array] = {}


    def _catch_up_program(self) -> Pending:
        engine = self.engine
        shape = engine.shape_struct

        def catch_up(state: DecodeState[jax.Array], token: jax.Array, position: jax.Array,
                     produced: jax.Array) -> DecodeState[jax.Array]:
            # inside jit, so the counters come out as buffers of their own (the next call donates them)
            return dataclasses.replace(state, cache=rolled_back(state.cache, position), token=token,
                                       position=position, produced=produced)

        def lower() -> Lowered:
            i32 = shape((), jnp.int32)
            fn = jax.jit(catch_up, donate_argnames=("state",))
            return fn.lower(engine.abstract_state(self.layouts, self.mode, 1), shape((1,), jnp.int32), i32,
                            i32)

        return engine.program(("catch_up", self.layouts, self.mode.needs), lower)

    def start(self, prompt: np.ndarray, bucket: int, spec: RunSpec, first: DecodeState[jax.Array]) -> None:
        """The prompt into the draft's cache; its next input is the main model's first token."""
        seeded = spec.replace(seed=(spec.seed + 1) % 2**32)  # its own random stream
        state, self.knobs, _, _ = run_prompt(self.engine, self.programs, prompt, bucket, seeded, self.knob_values)
        self.state = self.catch_up(state, *_local((first.token, first.position)), state.produced)

    def drafts(self, count: int) -> tuple[jax.Array, jax.Array | None]:
        """`count` drafts (1, MAX_DRAFTS) on the device, and their distributions when sampling."""
        if count not in self.counts:
            self.counts[count] = self.engine.put(np.int32(count))
        self.state, tokens, probs = self.propose(self.engine.weights, self.state, self.counts[count], self.knobs)
        return tokens, probs

    def follow(self, main: DecodeState[jax.Array]) -> None:
        """After a verdict: the draft's cache cut back to the main model's position, the main model's token next."""
        self.state = self.catch_up(self.state, *_local((main.token, main.position, main.produced)))

    def cache_bytes(self) -> int:
        return cache_bytes(self.state.cache) if self.state is not None else 0

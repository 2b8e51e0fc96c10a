"""Universal assisted decoding on the JAX path: a draft model with another tokenizer proposes text, not token ids.

Each verify pass, the text so far (the main model's ids decoded) is encoded with the draft's tokenizer; the draft
model reads it in one jitted prefill and proposes tokens greedily (its start, then its jitted proposal loop,
draft.py); their text, encoded with the main tokenizer, is the pass's drafts. The verify pass takes them as it
takes prompt lookup's: a fixed guess (q one-hot), so greedy keeps plain greedy's tokens and sampling keeps the main
model's distribution, whatever the draft proposed. Cutting the draft's own end token ends its text.

The draft re-reads the whole text every pass instead of rolling its cache back to where the two tokenizations
still agree (what transformers does): a prefill per pass, but no bookkeeping of two tokenizations to get wrong.
Its programs, a prefill and start per prompt bucket up to the longest text it may read, are asked for with the
request's, so they compile with it, never inside the timed decode.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from playground.backends.base import eos_ids
from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.extend import assisted_plan
from playground.backends.jax.caches.plan import CachePlan
from playground.backends.jax.caches.pytree import cache_bytes
from playground.backends.jax.chain import token_choice
from playground.backends.jax.chain.chain import Context
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import engine_for
from playground.backends.jax.programs import Programs, run_prompt
from playground.backends.jax.strategies.draft import MAX_DRAFTS, propose_program
from playground.backends.jax.strategies.plain_programs import plain_kernel
from playground.models.loaded import LoadedModel
from playground.registry.builtin import DRAFT_CACHE
from playground.spec import RunSpec

# the draft's text may take more of its tokens than the main model's: room for this many per main token
TOKENS_PER_TOKEN = 2


def draft_capacity(spec: RunSpec, prompt_len: int) -> int:
    """The longest text the draft may read, in its own tokens, with room for one proposal after it."""
    positions = cache_plan.sized_prompt(spec, prompt_len) + cache_plan.new_tokens(spec)
    return cache_plan.prefill_bucket(TOKENS_PER_TOKEN * positions + MAX_DRAFTS + 1)


def draft_plan(spec: RunSpec, config: Any, prompt_len: int) -> CachePlan:
    """The draft's preallocated cache: the longest text it may read in its own tokens, and one proposal."""
    return assisted_plan(spec.replace(cache=DRAFT_CACHE), config, draft_capacity(spec, prompt_len), MAX_DRAFTS + 1)


class UniversalDrafter:
    """The draft model's engine and programs for one request, and the drafts of each pass in main-model ids."""

    def __init__(self, draft: LoadedModel, spec: RunSpec, main_tokenizer: Any, prompt_len: int) -> None:
        self.engine, _ = engine_for(draft.model, 1, spec.weights)
        self.tokenizer, self.main_tokenizer = draft.tokenizer, main_tokenizer
        self.ends = set(eos_ids(draft.model.generation_config, draft.tokenizer))
        self.spec = spec.replace(seed=(spec.seed + 1) % 2**32)  # its own random stream (it proposes greedily)
        # the main model's chain without what reads the text so far, greedy: the verify pass applies the rest
        context = Context(self.engine.vocab_size, (), draft.tokenizer)
        self.mode, self.arg_values = token_choice.mode_for(spec, context, samples=False, keep_history=False)
        plan = draft_plan(spec, self.engine.config, prompt_len)
        self.layouts = plan.at(plan.lengths[0])  # preallocated for the longest text: its programs are few
        self.capacity = draft_capacity(spec, prompt_len)
        self.buckets: dict[int, Programs] = {}
        self.asked: list[Pending] = []
        bucket = cache_plan.prefill_bucket(max(1, prompt_len // TOKENS_PER_TOKEN))  # its text may take fewer tokens
        while bucket <= self.capacity:
            self._bucket(bucket)
            bucket *= 2
        kernel = plain_kernel(self.engine, cache_plan.MIN_PREFILL_BUCKET, self.mode, ())  # its state's shapes
        self.propose = propose_program(kernel, self.layouts, MAX_DRAFTS + 1)
        self.asked.append(self.propose)
        self.draft_s = 0.0  # host time spent drafting (the draft's prefill and proposal included)
        self.last_cache_bytes = 0

    def _bucket(self, bucket: int) -> Programs:
        """The prefill and start programs of one prompt bucket (asked for the first time they are needed)."""
        if bucket not in self.buckets:
            programs = Programs()
            programs.prefill = programs.add(self.engine.prefill_program(bucket, self.layouts))
            programs.start = programs.add(plain_kernel(self.engine, bucket, self.mode, ()).start_program(self.layouts))
            self.asked += programs.asked
            self.buckets[bucket] = programs
        return self.buckets[bucket]

    def drafts(self, main_ids: list[int], count: int) -> list[int]:
        """Up to `count` drafts in the main model's ids after the text of `main_ids` (prompt and new tokens)."""
        began = time.perf_counter()
        text = self.main_tokenizer.decode(main_ids, skip_special_tokens=True)
        ids = self.tokenizer.encode(text)
        if not count or not ids or len(ids) + count + 1 > self.capacity:  # nothing to read, or past its room
            return []
        bucket = cache_plan.prefill_bucket(len(ids))
        state, args, first, _ = run_prompt(self.engine, self._bucket(bucket), np.asarray([ids], np.int32), bucket,
                                            self.spec, self.arg_values)
        proposed = [first]
        if count > 1 and first not in self.ends:
            state, tokens, _ = self.propose(self.engine.weights, state, self.engine.put(np.int32(count - 1)), args)
            proposed += [int(t) for t in np.asarray(tokens)[0, : count - 1]]
        self.last_cache_bytes = cache_bytes(state.cache)
        ended = next((i for i, t in enumerate(proposed) if t in self.ends), len(proposed))
        continuation = self.tokenizer.decode(proposed[:ended], skip_special_tokens=True)
        found = self.main_tokenizer.encode(continuation, add_special_tokens=False)[:count] if continuation else []
        self.draft_s += time.perf_counter() - began
        return [int(t) for t in found]

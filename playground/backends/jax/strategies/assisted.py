"""Assisted (speculative) decoding as a plug-in of the request loop: drafts verified several at a time by one
jitted forward.

Decoding a token at a time reads every weight once per token; a verify pass reads them once for the last
token and all its drafts. Each pass: the host drafts (prompt lookup over the text so far, or a draft model's
proposal, draft.py), the device runs the main model over the last token and the drafts, keeps what plain
decoding would have produced (speculative.py) and rolls the cache back past the rest (verify.py), and the kept
tokens come back to the host, one sync per pass, streamed as they arrive. Greedy output is token for token
plain greedy's.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Any

import jax
import numpy as np

from playground import registry
from playground.backends.base import same_vocabulary
from playground.backends.jax.caches.extend import assisted_plan
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.chain.chain import Context
from playground.backends.jax.chain.masks import draft_rows, with_rows
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.strategies.draft import FIRST_DRAFTS, MAX_DRAFTS, Drafter, drafter_plan, next_draft_count
from playground.backends.jax.strategies.lookup import lookup
from playground.backends.jax.strategies.plain import PlainDecoding
from playground.backends.jax.strategies.plain_programs import Chunk, plain_kernel
from playground.backends.jax.strategies.universal import UniversalDrafter, draft_plan
from playground.backends.jax.strategies.verify import verify_program
from playground.backends.jax.strategy import Advance, Request, Run
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec
from playground.strategy_records.assisted import AssistStep


def draft_widths(drafts: int) -> tuple[int, ...]:
    """Verify widths compiled for up to `drafts` drafts: the last token plus that many."""
    return (drafts + 1,)


def verify_widths(spec: RunSpec) -> tuple[int, ...]:
    """The verify widths a request compiles: prompt lookup's n + 1, or a draft model's most drafts + 1."""
    return draft_widths(spec.prompt_lookup) if spec.assistant is None else (MAX_DRAFTS + 1,)


class AssistedDecoding(PlainDecoding):
    """Plain decoding's token choice, start and grow programs; a verify pass per cache layouts and width, and the
    draft counts."""

    streams = True
    replays_draws = False  # a verify pass draws as many times as it kept drafts: nothing fixed to replay

    def __init__(self, spec: RunSpec, draft: LoadedModel | None) -> None:
        super().__init__(spec, samples=registry.strategy(spec.strategy).samples(spec.assisted_sampling))
        self.draft = draft
        self.widths = verify_widths(spec)
        self.drafter: Drafter | None = None  # a draft model of the main model's vocabulary
        self.universal: UniversalDrafter | None = None  # a draft model of another tokenizer (drafts through text)
        self.draft_flags: list[bool] = []
        self.steps: list[AssistStep] = []  # per verify pass: its real drafts and how many were kept
        self.drafted = 0  # drafts proposed in all
        self.accepted = 0
        self.lookup_s = 0.0  # host time spent drafting
        self.next_drafts = min(FIRST_DRAFTS, MAX_DRAFTS)  # a draft model's next proposal size
        self.pending: tuple[jax.Array, int, jax.Array | None] | None = None  # the next pass's drafts, from width()

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        """Greedy, or the chain's sampling stages when the run samples (speculative sampling); the draft model's
        engine and programs (the request waits for them with its own)."""
        self.choose_tokens(bucket, context, room=max(self.widths))
        self.kernel = plain_kernel(engine, bucket, self.mode, self.eos)
        plan = self.plan(engine.config, prompt_len)
        if self.draft is None:
            return plan, []
        if self._universal(context.tokenizer, context.vocab_size):
            self.universal = UniversalDrafter(self.draft, self.spec, context.tokenizer, prompt_len)
            return plan, self.universal.asked
        self.drafter = Drafter(self.draft, self.spec, prompt_len, bucket, context, samples=not self.mode.greedy)
        return plan, self.drafter.programs.asked

    def plan(self, config: Any, prompt_len: int) -> CachePlan:
        """Room for the last verify pass, and spare ring slots."""
        return assisted_plan(self.spec, config, prompt_len, max(self.widths))

    def draft_plan(self, main_tokenizer: Any, main_vocab: int, prompt_len: int) -> CachePlan:
        """The draft model's preallocated cache: for a draft of the main model's vocabulary, or of another
        tokenizer (room for the whole text in its own tokens)."""
        assert self.draft is not None, "only with a draft model"
        config = self.draft.model.config.get_text_config(decoder=True)
        if self._universal(main_tokenizer, main_vocab):
            return draft_plan(self.spec, config, prompt_len)
        return drafter_plan(self.spec, config, prompt_len)

    def _universal(self, main_tokenizer: Any, main_vocab: int) -> bool:
        """The draft's tokens are not the main model's: it drafts through text (universal.py)."""
        assert self.draft is not None, "only with a draft model"
        width = int(self.draft.model.get_output_embeddings().weight.shape[0])
        return not same_vocabulary(main_tokenizer, self.draft.tokenizer) or width != main_vocab

    def step_programs(self, engine: Engine, layouts: Layouts) -> dict[Hashable, Pending]:
        with_q = self.drafter is not None and not self.mode.greedy
        return {(layouts, width): verify_program(self.kernel, layouts, width, with_q) for width in self.widths}

    def width(self, request: Request, run: Run, limit: int) -> int:
        """The next pass's drafts, kept for step(); never more than the tokens still wanted after the main
        model's own."""
        room = self.spec.max_new_tokens - run.produced - 1
        if self.drafter is not None:
            count = min(self.next_drafts, room)
            tokens, probs = self.drafter.drafts(count)
            # the draft runs on one device: its arrays laid out as the main model's (replicated over its mesh)
            self.pending = (request.engine.put(tokens), count, None if probs is None else request.engine.put(probs))
        elif self.universal is not None:
            text = [*request.prompt[0].tolist(), *self.stream.tokens]
            self.pending = self._padded(request, self.universal.drafts(text, min(self.next_drafts, room)))
        else:
            self.pending = self._looked_up(request, room)
        if self.matcher is not None:
            self._mask_drafts(request, run)
        return self.pending[0].shape[1] + 1  # the last token and the drafts

    def _mask_drafts(self, request: Request, run: Run) -> None:
        """A constrained pass: each position's mask after the drafts before it, and the drafts cut after the first
        one the grammar forbids (its own row's mask rejects it)."""
        assert self.pending is not None and self.context is not None
        drafts, count, probs = self.pending
        proposed = np.asarray(drafts)[0, :count].tolist()
        rows, kept = draft_rows(self.matcher, proposed, self.context.vocab_size, request.eos)
        self.arg_values = with_rows(self.arg_values, self.mask_stage, rows)
        run.args = request.engine.put(self.arg_values)
        self.pending = (drafts, kept, probs)

    def _looked_up(self, request: Request, room: int) -> tuple[jax.Array, int, None]:
        """Prompt lookup's drafts (1, width - 1), padded to the narrowest compiled width, and how many are real."""
        began = time.perf_counter()
        history = np.concatenate([request.prompt[0], np.asarray(self.stream.tokens, np.int32)])  # (T + n,)
        found = lookup(history, min(self.spec.prompt_lookup, room))
        self.lookup_s += time.perf_counter() - began
        return self._padded(request, found)

    def _padded(self, request: Request, found: Any) -> tuple[jax.Array, int, None]:
        """Drafts fixed on the host (prompt lookup's, or a draft of another tokenizer's), padded to the narrowest
        compiled width, and how many are real: the verify pass takes them as a one-hot guess."""
        width = min(w for w in self.widths if w > len(found))
        padded = np.zeros((1, width - 1), np.int32)  # (1, width - 1)
        padded[0, : len(found)] = found
        return request.engine.put(padded), len(found), None

    def step(self, request: Request, run: Run, limit: int) -> tuple[Chunk, jax.Array, jax.Array]:
        assert self.pending is not None, "width() drafts first"
        drafts, drafted, probs = self.pending  # (1, width - 1) drafts, how many are real, (1, width - 1, V) or None
        verify = request.programs.steps[run.layouts, drafts.shape[1] + 1]
        run.state, verdict = verify(request.engine.weights, run.state, drafts, request.scalar(drafted), probs,
                                    run.args)
        if self.drafter is not None:
            self.drafter.follow(run.state)
        return Chunk(verdict.tokens, verdict.info), verdict.kept_count, verdict.accepted

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        """A pass's kept tokens (W,) (-1 past `kept`) and their records; before the first pass, the start's token:
        a pass that kept it and no drafts (its third field says whether it ended the run, not drafts taken)."""
        records, kept, accepted = fetched
        tokens, info = records.tokens, records.info
        count, accepted = int(kept), int(accepted) if self.pending is not None else 0
        chunk = [int(t) for t in tokens[:count]]
        drafted = self.pending[1] if self.pending is not None else 0  # none before the first pass
        # the prefill's token is a pass without drafts, so step i's tokens start where the steps before it end
        real = np.asarray(self.pending[0])[0, :drafted].tolist() if self.pending is not None else []
        self.steps.append({"drafted": real, "accepted": accepted})
        self.next_drafts = next_draft_count(drafted, accepted) if drafted else self.next_drafts
        self.drafted += drafted
        self.accepted += accepted
        self.stream.add(chunk, info, now, self.mode.chain.names)
        self._consume(request, chunk)  # width() sends the next pass's masks, one row per draft
        self.draft_flags += [i < accepted for i in range(count)]
        if self.drafter is not None and self.pending is None:  # the first token is on the host: the draft starts
            self.drafter.start(request.prompt, request.bucket, self.spec, run.state)
        return Advance(chunk, count, done=not chunk or chunk[-1] in request.eos)

    def stop(self, request: Request, run: Run) -> int:
        return 0

    def outcome(self, request: Request, run: Run) -> dict[str, Any]:
        """The streamed tokens with the draft counts, and this path's figures in `extra`."""
        return {
            "acceptance_rate": self.accepted / self.drafted if self.drafted else None,
            "forward_passes": 1 + run.calls,  # the prefill gave the first token, each verify pass the rest
            "draft_flags": self.draft_flags, "assisted_steps": self.steps,
            "sequences": [self.stream.tokens], "token_info": self.stream.info, "token_times": self.stream.times,
            "constraint_replay": self._replay(),
            "extra": {"verify_widths": list(self.widths), "verify_passes": run.calls,
                      "draft_tokens_proposed": self.drafted, "draft_tokens_accepted": self.accepted,
                      "draft_lookup_s": round(self.lookup_s + (self.universal.draft_s if self.universal else 0.0),
                                              4),
                      "draft_kv_cache_bytes": self._draft_cache_bytes(), "universal": self.universal is not None}}

    def _draft_cache_bytes(self) -> int | None:
        if self.universal is not None:
            return self.universal.last_cache_bytes
        return self.drafter.cache_bytes() if self.drafter is not None else None


def assisted(spec: RunSpec, draft: LoadedModel | None = None) -> AssistedDecoding:
    """Strategy "assisted": drafts from a draft model (`draft`) or prompt lookup, verified by the main model."""
    return AssistedDecoding(spec, draft)

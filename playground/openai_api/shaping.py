"""Outcomes shaped as OpenAI's response objects: completions and chat completions, whole or as stream chunks,
with logprobs, usage, and our metrics in an extra `metrics` field."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from playground.openai_api.generation import Outcome, TokenLogprob
from playground.openai_api.request import ApiRequest

# what each choice's run measured, in the extra `metrics` field (the Result's metrics has more; docs/api.md)
METRICS = ("tokens_per_s", "ttft_s", "compile_s", "load_s", "total_s", "kv_cache_bytes", "weight_bytes",
           "ms_per_token_p50", "peak_rss_bytes")


class Shaper:
    """One response's id, creation time and model, and the objects that carry them."""

    def __init__(self, request: ApiRequest) -> None:
        self.request = request
        prefix = "cmpl" if request.kind == "completion" else "chatcmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.chunk_object = "text_completion" if request.kind == "completion" else "chat.completion.chunk"

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.request.model}

    def response(self, outcomes: Sequence[Outcome]) -> dict[str, Any]:
        """The whole (non-streamed) response."""
        obj = "text_completion" if self.request.kind == "completion" else "chat.completion"
        return {**self._head(obj), "choices": [self.choice(o) for o in outcomes], "usage": usage(outcomes),
                "metrics": [metrics(o) for o in outcomes]}

    def choice(self, outcome: Outcome) -> dict[str, Any]:
        if self.request.kind == "completion":
            return {"index": outcome.index, "text": outcome.text,
                    "logprobs": self.completion_logprobs(outcome.logprobs), "finish_reason": outcome.finish_reason}
        return {"index": outcome.index, "message": {"role": "assistant", "content": outcome.text},
                "logprobs": chat_logprobs(outcome.logprobs), "finish_reason": outcome.finish_reason}

    def completion_logprobs(self, tokens: list[TokenLogprob] | None, offset: int = 0) -> dict[str, Any] | None:
        """The legacy completions shape: parallel lists, the top alternatives as {text: logprob}."""
        if tokens is None:
            return None
        offsets, at = [], offset
        for token in tokens:
            offsets.append(at)
            at += len(token.text)
        return {"tokens": [t.text for t in tokens], "token_logprobs": [t.logprob for t in tokens],
                "top_logprobs": [None if t.logprob is None and not t.top else dict(t.top) for t in tokens],
                "text_offset": offsets}

    def delta_chunk(self, index: int, text: str, first: bool) -> dict[str, Any]:
        """Streamed text of one choice (the chat's first chunk of a choice names the role)."""
        if self.request.kind == "completion":
            choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None, "finish_reason": None}
        else:
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        return {**self._head(self.chunk_object), "choices": [choice]}

    def final_chunk(self, outcome: Outcome) -> dict[str, Any]:
        """A choice's last chunk: why it ended, its logprobs (all of them: they are known once the run ends) and
        its run's metrics."""
        if self.request.kind == "completion":
            choice: dict[str, Any] = {"index": outcome.index, "text": "",
                                      "logprobs": self.completion_logprobs(outcome.logprobs),
                                      "finish_reason": outcome.finish_reason}
        else:
            choice = {"index": outcome.index, "delta": {}, "logprobs": chat_logprobs(outcome.logprobs),
                      "finish_reason": outcome.finish_reason}
        return {**self._head(self.chunk_object), "choices": [choice], "metrics": [metrics(outcome)]}

    def usage_chunk(self, outcomes: Sequence[Outcome]) -> dict[str, Any]:
        return {**self._head(self.chunk_object), "choices": [], "usage": usage(outcomes)}


def chat_logprobs(tokens: list[TokenLogprob] | None) -> dict[str, Any] | None:
    """The chat shape: one entry per token with its bytes and its top alternatives."""
    if tokens is None:
        return None
    return {"content": [{"token": t.text, "logprob": t.logprob, "bytes": list(t.text.encode()),
                         "top_logprobs": [{"token": text, "logprob": lp, "bytes": list(text.encode())}
                                          for text, lp in t.top]} for t in tokens], "refusal": None}


def usage(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Each prompt's tokens counted once, every choice's generated tokens; of the prompt tokens, those the first
    choice of each prompt restored from the prefix store (OpenAI's `prompt_tokens_details.cached_tokens`)."""
    prompts = {o.prompt_index: o.prompt_tokens for o in outcomes}
    cached: dict[int, int] = {}
    for outcome in outcomes:
        cached.setdefault(outcome.prompt_index, outcome.cached_tokens)
    completion = sum(o.completion_tokens for o in outcomes)
    return {"prompt_tokens": sum(prompts.values()), "completion_tokens": completion,
            "total_tokens": sum(prompts.values()) + completion,
            "prompt_tokens_details": {"cached_tokens": sum(cached.values())}}


def metrics(outcome: Outcome) -> dict[str, Any]:
    """The choice's run as measured (shared by the choices of one beam search); null figures with echo only. Its
    `reuse`: what the prefix store did, and how a warm run differs from the cold one (the Result's record)."""
    measured: dict[str, Any] = dict(outcome.result["metrics"]) if outcome.result is not None else {}
    spec = outcome.result["spec"] if outcome.result is not None else {}
    return {"index": outcome.index, **{key: measured.get(key) for key in METRICS},
            "backend": spec.get("backend"), "strategy": spec.get("strategy"), "cache": spec.get("cache"),
            "seed": spec.get("seed"), "reuse": outcome.result.get("reuse") if outcome.result is not None else None}

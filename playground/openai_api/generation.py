"""An ApiRequest run through the runner, one choice at a time: text as it streams, then each choice's outcome
(its text cut at a stop string, why it ended, its tokens' log-probabilities, the run's metrics)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass

from playground import runner
from playground.events import DoneEvent, TextEvent
from playground.generation_slot import API_OWNER, Holder
from playground.openai_api import stops
from playground.openai_api.request import RECORDED_TOP, ApiRequest
from playground.openai_api.scoring import ScoredPrompt, score_prompt
from playground.result import Result, TokenRecord
from playground.spec import RunSpec

SEEDS = 2**32  # RunSpec's seeds: 0 to 2**32 - 1
# JSON has no -inf: a probability the Result records as 0 (below its 5 decimals) reads as this, as vLLM writes it
LOG_ZERO = -9999.0
API_WORK = {"completion": "an API completion", "chat": "an API chat completion"}  # as a waiting page names them


@dataclass(frozen=True)
class TokenLogprob:
    """One token as OpenAI's logprobs show it: its text, log-probability and the most likely alternatives."""

    text: str
    logprob: float | None  # None: the first prompt token (nothing predicts it), or nothing was recorded
    top: list[tuple[str, float]]


@dataclass(frozen=True)
class Delta:
    """More text of a choice, safe to send (no stop string can begin in it)."""

    index: int
    text: str


@dataclass(frozen=True)
class Outcome:
    """A finished choice."""

    index: int
    prompt_index: int
    text: str  # the completion, cut before the first stop string (with echo: the prompt, then the completion)
    finish_reason: str  # "stop" (a stop string or the end-of-sequence token) or "length"
    completion_tokens: int
    prompt_tokens: int
    logprobs: list[TokenLogprob] | None  # with echo, the prompt's tokens first
    result: Result | None  # the run that produced it; None with max_tokens=0 (echo only)
    cached_tokens: int = 0  # prompt tokens restored from the prefix store instead of prefilled


def run_request(request: ApiRequest, should_stop: Callable[[], bool] = lambda: False) -> Iterator[Delta | Outcome]:
    """Every choice in OpenAI's order (prompt by prompt, n choices each), streaming as the runner does."""
    for prompt_index, prompt in enumerate(request.prompts):
        first = prompt_index * request.n
        scored = (score_prompt(prompt, request.spec, request.top_logprobs or 0, list(request.history),
                                system=request.system)
                  if request.echo else None)
        if request.max_tokens == 0:
            assert scored is not None  # parse() allows max_tokens=0 only with echo
            for j in range(request.n):
                yield Outcome(index=first + j, prompt_index=prompt_index, text=prompt, finish_reason="length",
                              completion_tokens=0, prompt_tokens=len(scored.ids),
                              logprobs=_prompt_tokens(scored) if request.top_logprobs is not None else None,
                              result=None)
            continue
        if request.spec.num_return_sequences > 1:  # one beam search returns the n choices
            yield from _choices(request, request.spec, prompt, prompt_index, first, scored, should_stop)
            continue
        for j in range(request.n):
            spec = request.spec if j == 0 else request.spec.replace(seed=(request.spec.seed + j) % SEEDS)
            yield from _choices(request, spec, prompt, prompt_index, first + j, scored, should_stop)


def _choices(request: ApiRequest, spec: RunSpec, prompt: str, prompt_index: int, index: int,
             scored: ScoredPrompt | None, should_stop: Callable[[], bool]) -> Iterator[Delta | Outcome]:
    """One run: its text streamed (choice `index`), then an Outcome per returned sequence."""
    echo = prompt if request.echo else ""
    if echo:
        yield Delta(index, echo)
    streamed = _Streamed()
    yield from streamed.run(request, spec, prompt, index, should_stop)
    result, sent = streamed.result, streamed.sent
    if result is None:
        raise RuntimeError("run ended without a result")
    for k, text in enumerate(result["sequences"]):
        found = stops.scan(text, request.stop)
        kept = text if found.cut is None else text[:found.cut]
        if k == 0 and len(kept) > sent:
            yield Delta(index, kept[sent:])
        elif k > 0:  # beam search's other returned sequences: whole, once the search has ended
            yield Delta(index + k, echo + kept)
        produced = (result.get("sequence_tokens") or [result["new_tokens"]])[k]
        ended = found.cut is not None or (produced < spec.max_new_tokens and not result["stopped"])
        tokens = _kept_tokens(result["tokens"], len(kept)) if k == 0 else None
        logprobs = None
        if request.top_logprobs is not None and tokens is not None:
            wider = _wider_alternatives(request, spec, prompt, [t["id"] for t in tokens])
            generated = [_generated(t, request.top_logprobs, request.logprobs_mode, wider[i] if wider else None)
                         for i, t in enumerate(tokens)]
            logprobs = (_prompt_tokens(scored) if scored is not None else []) + generated
        yield Outcome(index=index + k, prompt_index=prompt_index, text=echo + kept,
                      finish_reason="stop" if ended else "length",
                      completion_tokens=len(tokens) if tokens is not None and found.cut is not None else produced,
                      prompt_tokens=result["prompt_tokens"], logprobs=logprobs, result=result,
                      cached_tokens=min(result.get("reuse", {}).get("reused_tokens", 0), result["prompt_tokens"]))


class _Streamed:
    """One run's text as it streams, held back where a stop string may begin; the run stops at a stop string."""

    def __init__(self) -> None:
        self.sent = 0  # characters sent as deltas
        self.cut = False  # a stop string has appeared: the run stops at its next token
        self.result: Result | None = None

    def run(self, request: ApiRequest, spec: RunSpec, prompt: str, index: int,
            should_stop: Callable[[], bool]) -> Iterator[Delta]:
        history = list(request.history) or None
        with closing(runner.run(prompt, spec, lambda: self.cut or should_stop(), history, system=request.system,
                                holder=Holder(API_WORK[request.kind], owner=API_OWNER),
                                scope=request.scope)) as events:
            for event in events:
                if isinstance(event, TextEvent):
                    found = stops.scan(event.text, request.stop)
                    self.cut = found.cut is not None
                    if found.safe > self.sent:
                        yield Delta(index, event.text[self.sent:found.safe])
                        self.sent = found.safe
                elif isinstance(event, DoneEvent):
                    self.result = event.result


def _kept_tokens(records: list[TokenRecord], length: int) -> list[TokenRecord]:
    """The tokens that make up the first `length` characters of the text (all of them when nothing was cut)."""
    kept, reach = [], 0
    for record in records:
        if reach >= length:
            break
        kept.append(record)
        reach += len(record["text"])
    return kept


def _log(p: float | None) -> float | None:
    if p is None:
        return None
    return math.log(p) if p > 0 else LOG_ZERO


def _wider_alternatives(request: ApiRequest, spec: RunSpec, prompt: str,
                        generated: list[int]) -> list[list[tuple[str, float]]] | None:
    """More alternatives per generated token than the records keep (raw mode only: parse() refuses the rest):
    the model's most likely tokens at each position from a teacher-forced forward over prompt + output."""
    if request.top_logprobs is None or request.top_logprobs <= RECORDED_TOP:
        return None
    scored = score_prompt(prompt, spec, request.top_logprobs, list(request.history),
                          (*spec.prefix_ids, *generated), system=request.system)
    first = len(scored.ids) - len(generated)  # the position of the first generated token
    return [row or [] for row in scored.top[first:]]


def _generated(record: TokenRecord, top: int, mode: str,
               wider: list[tuple[str, float]] | None = None) -> TokenLogprob:
    """A generated token's log-probability: "raw", the model's own softmax (p_model); "processed", the
    distribution it was drawn from after the logits chain (p). Its alternatives are the model's most likely
    tokens as recorded: by p_model (raw), or those the chain kept, by p (processed); or `wider` ones. The logs
    are the records' own, taken before p is rounded (a tail token's log would not survive 5 places)."""
    processed = mode == "processed"
    ranked: list[tuple[str, float]]
    if record.get("alternatives"):
        logged = [(a["text"], a.get("logprob") if processed else a.get("logprob_model"))
                  for a in record.get("alternatives") or []]
        ranked = [(text, lp) for text, lp in logged if lp is not None]
    else:  # records without alternatives keep (text, p, p_model) only
        pairs = ((text, p if processed else p_model) for text, p, p_model in record["top"] or [])
        ranked = [(text, math.log(p)) for text, p in pairs if p > 0]
    ranked.sort(key=lambda pair: -pair[1])
    recorded = record.get("logprob") if processed else record.get("logprob_model")
    chosen = recorded if recorded is not None else _log(record["p"] if processed else record["p_model"])
    alternatives = wider[:top] if wider is not None else ranked[:top]
    return TokenLogprob(record["text"], chosen, alternatives)


def _prompt_tokens(scored: ScoredPrompt | None) -> list[TokenLogprob]:
    if scored is None:
        return []
    return [TokenLogprob(text, lp, top or []) for text, lp, top in zip(scored.texts, scored.logprobs, scored.top,
                                                                        strict=True)]

"""RunSpec + prompt -> stream of events -> Result JSON: the only entry point the UI and the CLI call."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from playground.errors import PlaygroundError
from playground.events import DoneEvent, GenerationOutput, ProgressEvent, TextEvent
from playground.metrics import PeakRss, per_token_latencies, summarize
from playground.models import catalog, memory
from playground.spec import RunSpec

Event = ProgressEvent | TextEvent | DoneEvent
MAX_PROMPT_CHARS = 100_000
BACKEND_MODULES = {"torch": "playground.backends.torch.generate", "jax": "playground.backends.jax.decoder"}


def max_prompt_tokens() -> int:
    return int(os.environ.get("PLAYGROUND_MAX_PROMPT_TOKENS", "2048"))


def max_request_seconds() -> float:
    """Wall-time limit of one generation; past it the run stops at the next token and says so."""
    return float(os.environ.get("PLAYGROUND_MAX_REQUEST_SECONDS", "600"))


def check_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str):
        raise PlaygroundError(f"prompt must be text, got {type(prompt).__name__}")
    if not prompt.strip():
        raise PlaygroundError("prompt is empty; type some text to continue")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise PlaygroundError(f"prompt has {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}")
    return prompt


def versions() -> dict[str, str | None]:
    """Package versions read from metadata, so reporting them never imports jax or gradio."""
    found = {}
    for name in ("torch", "transformers", "jax", "torchax", "gradio"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


History = list[tuple[str, str]]


def encode_prompt(loaded: catalog.LoadedModel, prompt: str, chat: bool | None, history: History | None = None) -> Any:
    """Token ids (1, T) for the prompt, through the chat template when asked (default: instruct models).

    `history` holds earlier (user, assistant) turns of a multi-turn chat; it needs the chat template.
    """
    tokenizer = loaded.tokenizer
    use_chat = loaded.instruct if chat is None else chat
    if history and not use_chat:
        raise PlaygroundError("earlier chat turns need chat mode; set chat to true or clear the conversation")
    if use_chat:
        if getattr(tokenizer, "chat_template", None) is None:
            raise PlaygroundError(f"model {loaded.name} has no chat template; set chat to false")
        messages = []
        for user, assistant in history or []:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        messages.append({"role": "user", "content": prompt})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    else:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
    if ids.shape[1] > max_prompt_tokens():
        raise PlaygroundError(
            f"prompt is {ids.shape[1]} tokens; the limit is {max_prompt_tokens()} (PLAYGROUND_MAX_PROMPT_TOKENS)")
    return ids


def check_cache_fits(loaded: catalog.LoadedModel, spec: RunSpec, prompt_tokens: int) -> None:
    """Refuse before allocating: the full-precision cache for prompt + max_new_tokens, per beam."""
    total = prompt_tokens + spec.max_new_tokens
    limit = getattr(loaded.model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    if limit and total > limit:
        raise PlaygroundError(
            f"prompt ({prompt_tokens} tokens) + max_new_tokens ({spec.max_new_tokens}) = {total} exceeds "
            f"{loaded.name}'s context of {limit} tokens; lower max_new_tokens or shorten the prompt")
    sequences = spec.num_beams if spec.strategy == "beam" else 1
    need = memory.kv_bytes_estimate(loaded.model.config, total, sequences)
    memory.check_fits(f"the KV cache for {total} tokens x {sequences} sequence(s)", need,
                      catalog.LOADED.resident_bytes())


class IncrementalText:
    """Decodes the growing token list so the streamed deltas add up exactly to the final text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""

    def add(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        decoded = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if decoded.endswith("\ufffd"):
            return ""  # half of a multi-byte character: wait for the rest
        return self._advance(decoded)

    def finish(self) -> str:
        return self._advance(self.tokenizer.decode(self.ids, skip_special_tokens=True))

    def _advance(self, decoded: str) -> str:
        delta = decoded[len(self.text):] if decoded.startswith(self.text) else decoded
        self.text = decoded if decoded.startswith(self.text) else self.text + decoded
        return delta


def run(prompt: str, spec: RunSpec, should_stop: Callable[[], bool] | None = None,
        history: History | None = None) -> Iterator[Event]:
    """Load, tokenize, generate in a worker thread, and yield events as they happen; ends with DoneEvent.

    Closing the iterator early (a client that went away) stops the generation at its next step.
    """
    check_prompt(prompt)
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    cancelled = threading.Event()
    deadline = time.monotonic() + max_request_seconds()

    def stop_requested() -> bool:
        return cancelled.is_set() or (should_stop is not None and should_stop()) or time.monotonic() > deadline

    def work() -> None:
        try:
            with PeakRss() as rss:
                load_start = time.perf_counter()
                loaded, _ = catalog.LOADED.get(spec.model, spec.weights,
                                               lambda f, m: events.put(("progress", (f, m))))
                load_s = time.perf_counter() - load_start
                events.put(("loaded", loaded))
                input_ids = encode_prompt(loaded, prompt, spec.chat, history)
                check_cache_fits(loaded, spec, input_ids.shape[1])
                backend = importlib.import_module(BACKEND_MODULES[spec.backend])
                output = backend.generate(loaded, input_ids, spec, lambda ids: events.put(("tokens", ids)),
                                          stop_requested)
                end = time.perf_counter()
            events.put(("done", (loaded, input_ids.shape[1], output, end, load_s, rss.peak)))
        except BaseException as exc:  # noqa: BLE001 - the consumer re-raises it in its own thread
            events.put(("error", exc))

    worker = threading.Thread(target=work, name=f"run-{spec.backend}", daemon=True)
    worker.start()
    text = IncrementalText(None)  # replaced once the model (and its tokenizer) is loaded
    try:
        while True:
            kind, payload = events.get()
            if kind == "progress":
                yield ProgressEvent(*payload)
            elif kind == "loaded":
                text = IncrementalText(payload.tokenizer)
            elif kind == "tokens":
                delta = text.add(payload)
                if delta:
                    yield TextEvent(delta, text.text, len(text.ids))
            elif kind == "error":
                raise _user_error(payload)
            else:
                loaded, prompt_tokens, output, end, load_s, peak = payload
                tail = text.finish()
                if tail:
                    yield TextEvent(tail, text.text, len(text.ids))
                yield DoneEvent(build_result(spec, loaded, prompt_tokens, output, end, load_s, peak))
                return
    finally:
        cancelled.set()


def _user_error(exc: BaseException) -> BaseException:
    """PlaygroundErrors pass as they are; out-of-memory becomes one that says what to lower."""
    if isinstance(exc, MemoryError):
        return PlaygroundError("out of memory; lower max_new_tokens or pick smaller weights (bf16, int8)")
    return exc


def build_result(spec: RunSpec, loaded: catalog.LoadedModel, prompt_tokens: int, output: GenerationOutput,
                 end: float, load_s: float, peak_rss: int) -> dict[str, Any]:
    tokenizer = loaded.tokenizer
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in output.sequences]
    metrics = summarize(output, end, load_s)
    latencies = per_token_latencies(output.token_times)
    metrics["peak_rss_bytes"] = int(peak_rss)
    spec_dict = spec.to_dict()
    spec_dict["chat"] = loaded.instruct if spec.chat is None else spec.chat
    return {
        "spec": spec_dict,
        "text": texts[0] if texts else "",
        "sequences": texts,
        "prompt_tokens": int(prompt_tokens),
        "new_tokens": len(output.sequences[0]) if output.sequences else 0,
        "token_ids": list(output.sequences[0]) if output.sequences else [],
        "metrics": metrics,
        "versions": versions(),
        "tokens": token_view(tokenizer, output),
        "timeline": {"token_ms": [round(x * 1000, 3) for x in latencies], "kv_cache_bytes": output.kv_trace},
        "scores": output.scores,
        "forward_passes": output.forward_passes,
        "stopped": output.stopped,
        "extra": output.extra,
    }


def token_view(tokenizer: Any, output: GenerationOutput) -> list[dict[str, Any]]:
    """One entry per generated token of the first sequence, with what the backend knew about it."""
    ids = output.sequences[0] if output.sequences else []
    info = output.token_info or [{}] * len(ids)
    drafts = output.draft_flags or [None] * len(ids)
    view = []
    for token, record, draft in zip(ids, info, drafts, strict=False):
        top = record.get("top")
        view.append({
            "id": token,
            "text": tokenizer.decode([token]),
            "p": _round(record.get("p")),
            "entropy": _round(record.get("entropy")),
            "top": [[tokenizer.decode([i]), _round(p)] for i, p in top] if top else None,
            "draft": draft,
        })
    return view


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 5)


def run_to_result(prompt: str, spec: RunSpec) -> dict[str, Any]:
    """Run to the end and return the Result JSON (the CLI and the API use this)."""
    for event in run(prompt, spec):
        if isinstance(event, DoneEvent):
            return event.result
    raise RuntimeError("run ended without a result")

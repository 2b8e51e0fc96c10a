"""RunSpec + prompt -> stream of events -> Result: the only entry point the UI, the API and the CLI call.

The runner loads the models (main and draft), encodes the prompt, checks the memory budget, and runs the
chosen backend in a worker thread under the one generation lock, turning what it emits into events.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from playground.backends import prefix_store
from playground.backends.base import GenerationOutput
from playground.decode_costs import DECODE_COSTS
from playground.errors import PlaygroundError
from playground.events import DoneEvent, Event, HypothesisEvent, IncrementalText, ProgressEvent, TextEvent
from playground.generation_slot import LEFT_RUNNING, GenerationSlot, Holder, held_reporting
from playground.limits import max_prompt_chars, max_prompt_tokens, max_request_seconds, prompt_tokens_refusal
from playground.metrics import PeakRss, cpu_sample, machine_load
from playground.models import memory
from playground.models.catalog import check_available, saved_config
from playground.models.loaded import LOADED, LoadedModel
from playground.registry import backend_type
from playground.registry.chain import parse_logit_bias
from playground.result import NO_QUALITY, Quality, Result, build_result, combine_runs
from playground.spec import RunSpec, check_vocabulary

if TYPE_CHECKING:
    from playground.backends.base import Backend

TICK_S = 1.0  # how often a long stage's progress is repeated with its elapsed time
# One generation at a time per process, whichever backend (playground/generation_slot.py says why).
GENERATION_LOCK = GenerationSlot()


def check_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str):
        raise PlaygroundError(f"prompt must be text, got {type(prompt).__name__}")
    if not prompt.strip():
        raise PlaygroundError("prompt is empty; type some text to continue")
    if len(prompt) > max_prompt_chars():
        raise PlaygroundError(f"prompt has {len(prompt)} characters; the limit is {max_prompt_chars()}")
    return prompt


def preflight(spec: RunSpec) -> None:
    """Refuse, before anything loads, what can be known to fail: a model or draft that cannot be had here, and
    what the backend refuses from the configs on disk (an architecture, a layer layout, a device count). RunSpec
    itself has checked the ranges and the combination."""
    check_available(spec.model)
    if spec.assistant is not None:
        check_available(spec.assistant)
    config = saved_config(spec.model)
    draft_config = saved_config(spec.assistant) if spec.assistant is not None else None
    backend_for(spec.backend).preflight(spec, config, draft_config)
    text = (config or {}).get("text_config") or config or {}
    if isinstance(text.get("vocab_size"), int):  # otherwise checked once the model is loaded, before it runs
        check_vocabulary(spec.prefix_ids, text["vocab_size"], spec.model)


def backend_for(name: str) -> Backend:
    """The backend that runs `name`; its module imports neither torch nor jax until it generates."""
    backend: Backend = backend_type(name).make()
    return backend


History = list[tuple[str, str]]


def encode_prompt(loaded: LoadedModel, prompt: str, chat: bool | None, history: History | None = None,
                  system: str = "") -> list[int]:
    """The prompt's token ids, through the chat template when asked (default: instruct models).

    `history` holds earlier (user, assistant) turns of a multi-turn chat and `system` a system turn before them
    (the OpenAI API's); both need the chat template, which places the system turn as the model's template does.
    """
    tokenizer = loaded.tokenizer
    use_chat = loaded.instruct if chat is None else chat
    if history and not use_chat:
        raise PlaygroundError("earlier chat turns need chat mode; set chat to true or clear the conversation")
    if system and not use_chat:
        raise PlaygroundError("a system message needs chat mode; set chat to true or leave the system message out")
    if use_chat:
        if getattr(tokenizer, "chat_template", None) is None:
            raise PlaygroundError(f"model {loaded.name} has no chat template; set chat to false")
        messages = [{"role": "system", "content": system}] if system else []
        for user, assistant in history or []:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        messages.append({"role": "user", "content": prompt})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = list(tokenizer(text, add_special_tokens=False).input_ids)
    else:
        ids = list(tokenizer(prompt).input_ids)
    if len(ids) > max_prompt_tokens():
        raise PlaygroundError(prompt_tokens_refusal(len(ids)))
    return ids


def with_prefix(loaded: LoadedModel, prompt_ids: list[int], prefix_ids: tuple[int, ...]) -> list[int]:
    """The prompt's ids followed by the forced ones, which generation then continues from."""
    if prefix_ids:
        check_vocabulary(prefix_ids, loaded.model.config.get_text_config(decoder=True).vocab_size, loaded.name)
    return prompt_ids + list(prefix_ids)


def check_cache_fits(loaded: LoadedModel, spec: RunSpec, prompt_tokens: int, draft: LoadedModel | None = None) -> int:
    """Refuse before allocating: a request past the model's context, or what the backend would hold for it
    (its caches, and its own copy of the weights) past the memory budget, which counts the prefix store's
    entries. Returns the bytes of the store emptied to let the run go (0: none)."""
    total = prompt_tokens + spec.max_new_tokens
    limit = getattr(loaded.model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    if limit and total > limit:
        raise PlaygroundError(
            f"prompt ({prompt_tokens} tokens) + max_new_tokens ({spec.max_new_tokens}) = {total} exceeds "
            f"{loaded.name}'s context of {limit} tokens; lower max_new_tokens or shorten the prompt")
    need = backend_for(spec.backend).memory_needed(loaded, spec, prompt_tokens, draft)
    for model, held in need.resident:
        LOADED.reserve(model, held.what, held.bytes, hint=held.hint)
    return prefix_store.fit_beside_store(lambda stored: memory.check_fits(
        need.run.what, need.run.bytes, LOADED.resident_bytes() + stored, hint=need.run.hint))


@dataclass
class _Loaded:
    """What the worker has once the models are in memory: the tokenizer decodes the stream from here on."""

    model: LoadedModel
    draft: LoadedModel | None
    load_s: float


@dataclass
class _Hypothesis:
    """Beam search's leading beam (new token ids), as the backend previewed it."""

    ids: list[int]


@dataclass
class _Finished:
    loaded: _Loaded
    prompt_tokens: int
    runs: list[tuple[GenerationOutput, float]]  # each timed run's output and when it ended
    peak_rss: int
    quality: Quality  # the first run's output under the fp32 model (see `_judge`)
    reuse: prefix_store.ReuseRecord | None = None  # what the prefix store did; None: the run had no scope

    def result(self, spec: RunSpec) -> Result:
        """One Result; repeated runs combined (medians, every run kept)."""
        model, draft = self.loaded.model, self.loaded.draft
        weights = self.runs[0][0].weight_bytes
        if weights is None:
            weights = model.weight_bytes + (draft.weight_bytes if draft is not None else 0)
        results = [build_result(spec, model, self.prompt_tokens, output, end, self.loaded.load_s if i == 0 else 0.0,
                                self.peak_rss, weights, self.quality) for i, (output, end) in enumerate(self.runs)]
        combined = combine_runs(results)
        if self.reuse is not None:
            combined["reuse"] = self.reuse
        return combined


WIND_DOWN_S = 30.0  # the most a finished run's worker is waited for (it has sent its last report)


class _Job:
    """One run: a worker thread that loads and generates, and the queue of what it reports, in order."""

    def __init__(self, prompt: str, spec: RunSpec, should_stop: Callable[[], bool] | None,
                 history: History | None, judged: bool = True, system: str = "", holder: Holder | None = None,
                 scope: str | None = None) -> None:
        self.prompt, self.spec, self.history, self.judged, self.system = prompt, spec, history, judged, system
        self.holder = holder or Holder()
        self.scope = scope
        self.reports: queue.Queue[object] = queue.Queue()
        self.cancelled = threading.Event()
        self._external_stop = should_stop
        self._deadline = time.monotonic() + max_request_seconds()
        self._thread = threading.Thread(target=self._work, name=f"run-{spec.backend}", daemon=True)

    def stop_requested(self) -> bool:
        return (self.cancelled.is_set() or (self._external_stop is not None and self._external_stop())
                or time.monotonic() > self._deadline)

    def start(self) -> None:
        self._thread.start()

    def _progress(self, fraction: float, message: str) -> None:
        self.reports.put(ProgressEvent(fraction, message))

    def _slot(self) -> AbstractContextManager[bool]:
        """The generation slot, with progress while it waits; a stop while it waits: the block gets False."""
        return held_reporting(GENERATION_LOCK, self.holder, self._progress, self.stop_requested)

    def _check_config(self, config: Any) -> None:
        """The refusals that need the model's config, made before its weights load (both backends): the cache's,
        and biased tokens outside the vocabulary."""
        from playground.backends.refusals import check_cache  # imported here: the page starts without torch

        check_cache(self.spec, config)
        biased = tuple(token for token, _ in parse_logit_bias(self.spec.logit_bias))
        check_vocabulary(biased, config.get_text_config(decoder=True).vocab_size, self.spec.model, "logit_bias")

    def _load(self) -> _Loaded:
        """The main model, then the draft (never evicting the main model for it); both count in load_s."""
        start = time.perf_counter()
        weights = backend_for(self.spec.backend).source_weights(self.spec)
        model, _ = LOADED.get(self.spec.model, weights, self._progress, check=self._check_config)
        draft = None
        if self.spec.assistant is not None:
            draft, _ = LOADED.get(self.spec.assistant, weights, self._progress, keep=[model])
        return _Loaded(model, draft, time.perf_counter() - start)

    def _work(self) -> None:
        try:
            with PeakRss() as rss:
                loaded = self._load()
                self.reports.put(loaded)
                prompt_ids = encode_prompt(loaded.model, self.prompt, self.spec.chat, self.history, self.system)
                input_ids = with_prefix(loaded.model, prompt_ids, self.spec.prefix_ids)
                freed = check_cache_fits(loaded.model, self.spec, len(input_ids), loaded.draft)
                backend = backend_for(self.spec.backend)
                refusal = backend.reuse_refusal(loaded.model, self.spec) if self.scope is not None else None
                plan, note = prefix_store.plan(self.spec, self.scope, refusal, input_ids)
                runs = self._generate(loaded, input_ids, plan)
                reuse = prefix_store.keep(self.spec, self.scope, plan, runs[0][0], len(input_ids), note, freed)
                # a stopped run (Stop, a closed tab, a client gone) is not judged: its slot is freed at once
                judged = self.judged and not self.stop_requested()
                quality = self._judge(loaded, input_ids, runs[0][0].sequences[0]) if judged else NO_QUALITY
            self.reports.put(_Finished(loaded, len(prompt_ids), runs, rss.peak, quality, reuse))
        except BaseException as exc:  # noqa: BLE001 - the consumer re-raises it in its own thread
            self.reports.put(exc)

    def _generate(self, loaded: _Loaded, input_ids: list[int],
                  plan: prefix_store.ReusePlan | None = None) -> list[tuple[GenerationOutput, float]]:
        """spec.repeats timed runs under the generation lock; the first one streams its tokens. Every run starts
        from the same kept cache (repeats time the same work); only the first hands its own back."""
        backend = backend_for(self.spec.backend)
        runs: list[tuple[GenerationOutput, float]] = []
        for index in range(self.spec.repeats):
            emit = self.reports.put if index == 0 else _ignore_tokens
            preview = (lambda ids: self.reports.put(_Hypothesis(ids))) if index == 0 else None
            reuse = {} if plan is None else {"reuse": plan if index == 0 else replace(plan, keep=False)}
            with self._slot() as held:
                if not held:  # stopped while it waited for the slot: nothing ran
                    runs.append((_stopped_waiting(), time.perf_counter()))
                    break
                before, began = cpu_sample(), time.monotonic()
                output = backend.generate(loaded.model, input_ids, self.spec, emit, self.stop_requested, loaded.draft,
                                          progress=self._progress, preview=preview, **reuse)
                load = machine_load(before, cpu_sample())
                # to 0.1 ms: a tiny model's run takes a few ms, and all of it may be overlapped
                left_running = round(LEFT_RUNNING.overlap_s(began, time.monotonic()), 4)
            if load is not None:  # how much of the machine other work took while this run was timed
                if left_running:  # a compile a stopped run left behind: this process's CPU time, but not this run's
                    load |= {"left_running_s": left_running, "busy": True}
                output.extra["machine_load"] = load
            runs.append((output, time.perf_counter()))
            if output.stopped:
                break
        return runs

    def _judge(self, loaded: _Loaded, input_ids: list[int], new_ids: list[int]) -> Quality:
        """The output read by the full-precision model (the run's own when it is fp32): quality beside speed, so
        the cost of int8 weights, a 2-bit cache or a short window is a number. With other weights than fp32, also
        the mean KL of the run's model's next-token distributions from fp32's along the output. Not timed."""
        from playground.backends.torch.reference import judge, mean_kl  # here: keeps torch out of page start-up

        reference = loaded.model
        if loaded.model.weights != "fp32":
            keep = [loaded.model] + ([loaded.draft] if loaded.draft is not None else [])
            reference, _ = LOADED.get(self.spec.model, "fp32", self._progress, keep=keep)
        with self._slot() as held:
            if not held:  # stopped while it waited: the run's figures stand without the verdict
                return NO_QUALITY
            verdict = judge(reference.model, input_ids, new_ids)
            kl = None
            if self.spec.weights != "fp32" and verdict.log_probs is not None:
                mine = backend_for(self.spec.backend).logprobs_along(loaded.model, self.spec, input_ids, new_ids)
                kl = float(f"{mean_kl(verdict.log_probs, mine):.4g}")  # 4 significant figures: it can be tiny
        return verdict.mean_logprob, verdict.greedy_divergence, kl

    def _reports(self) -> Iterator[object]:
        """The worker's reports; while a stage (a load, a compile) runs with nothing new to say, its progress
        again every TICK_S with the time it has taken so far, so a long silent stage is never mistaken for a hang."""
        stage: tuple[ProgressEvent, float] | None = None
        while True:
            try:
                report = self.reports.get(timeout=TICK_S)
            except queue.Empty:
                if stage is not None:
                    yield replace(stage[0], elapsed_s=time.monotonic() - stage[1])
                continue
            if isinstance(report, ProgressEvent):
                stage = (report, time.monotonic()) if report.fraction < 1.0 else None
            else:
                stage = None
            yield report

    def events(self) -> Iterator[Event]:
        """Reports turned into events: token ids into text deltas, the finish into the Result."""
        text = IncrementalText(None)  # replaced once the model (and its tokenizer) is loaded
        for report in self._reports():
            if isinstance(report, ProgressEvent):
                yield report
            elif isinstance(report, _Loaded):
                text = IncrementalText(report.model.tokenizer)
            elif isinstance(report, list):  # token ids, as the backend emitted them
                delta = text.add(report)
                if delta:
                    yield TextEvent(delta, text.text, len(text.ids))
            elif isinstance(report, _Hypothesis):
                yield HypothesisEvent(text.tokenizer.decode(report.ids, skip_special_tokens=True), len(report.ids))
            elif isinstance(report, BaseException):
                self._wind_down()
                raise _user_error(report)
            elif isinstance(report, _Finished):
                self._wind_down()
                tail = text.finish()
                if tail:
                    yield TextEvent(tail, text.text, len(text.ids))
                result = report.result(self.spec)
                DECODE_COSTS.record(result)
                yield DoneEvent(result)
                return

    def _wind_down(self) -> None:
        """Wait for the worker, which has sent its last report, to return. A process that exits right after a
        run (the CLI) would otherwise tear down torch while that thread still frees the run's tensors, and
        die with "terminate called without an active exception" (seen once in a loaded test run)."""
        self._thread.join(timeout=WIND_DOWN_S)


def run(prompt: str, spec: RunSpec, should_stop: Callable[[], bool] | None = None,
        history: History | None = None, judged: bool = True, system: str = "",
        holder: Holder | None = None, scope: str | None = None) -> Generator[Event, None, None]:
    """Load, tokenize, generate in a worker thread, and yield events as they happen; ends with DoneEvent.
    `judged=False` skips reading the output with the full-precision model (a step of step mode: one more
    forward over the whole text for a figure no step shows). `holder` names the run to those who wait for the
    generation slot meanwhile (a sweep's runs are long work: short requests go between them). `scope`: whose
    prefix store entries the run may start from and leaves its cache to (a page session, an API key and salt);
    None: the store is not used.

    What can be refused without loading anything is refused first (the prompt, see `preflight`). Closing the
    iterator early (a client that went away) stops the generation at its next step.
    """
    check_prompt(prompt)
    preflight(spec)
    job = _Job(prompt, spec, should_stop, history, judged, system, holder, scope)
    job.start()
    try:
        yield from job.events()
    finally:
        job.cancelled.set()


def _stopped_waiting() -> GenerationOutput:
    """The output of a run stopped before it had the generation slot: no token, nothing timed."""
    return GenerationOutput(sequences=[[]], start_time=time.perf_counter(), token_times=[], kv_cache_bytes=0,
                            forward_passes=0, stopped=True, extra={"stopped_while_waiting": True})


def _ignore_tokens(ids: list[int]) -> None:
    """Repeated runs stream nothing: their tokens are the first run's."""


def _user_error(exc: BaseException) -> BaseException:
    """PlaygroundErrors pass as they are; out-of-memory becomes one that says what to lower."""
    if isinstance(exc, MemoryError):
        return PlaygroundError("out of memory; lower max_new_tokens or pick smaller weights (bf16, int8)")
    return exc


def encode_text(spec: RunSpec, text: str) -> list[tuple[int, str]]:
    """The tokens of `text` under spec.model's tokenizer, each with its own text (what typing forces in step
    mode); loads the model as a run of `spec` would."""
    check_available(spec.model)
    loaded, _ = LOADED.get(spec.model, backend_for(spec.backend).source_weights(spec))
    ids = loaded.tokenizer.encode(text, add_special_tokens=False)
    return [(int(i), loaded.tokenizer.decode([i])) for i in ids]


def run_to_result(prompt: str, spec: RunSpec, *, judged: bool = True, scope: str | None = None) -> Result:
    """Run to the end and return the Result (the CLI, the API and the benchmarks use this; `judged` and `scope`
    as `run` takes them)."""
    for event in run(prompt, spec, judged=judged, scope=scope):
        if isinstance(event, DoneEvent):
            return event.result
    raise RuntimeError("run ended without a result")

"""Soak test: N clients send random valid requests to a served app for M minutes, some leaving mid-stream.

`python -m playground soak --minutes 3 --clients 4` starts the app on a free loopback port (or uses --url
with --pid). It first runs one short request per bundled model and backend, one after the other, so both
models are loaded; then the clients start, and the soak's clock with them. Each client draws requests over
every backend, strategy and cache the registry holds, both bundled models, prompts of 10 to ~400 tokens and
varied knobs; a share of them is cancelled after a short wait, as a visitor who closes the tab. The app's
resident memory is sampled throughout.

It reports requests, served, failures, refusals (a compatibility message is a refusal; an error without a
message, or a result without tokens, is a failure), latency percentiles and RSS over time, and exits 1 on a
failure or when memory rose more than RSS_RISE_LIMIT after the warm-up. RSS swings by hundreds of MiB while
XLA compiles, so single samples are not compared: the median of the run's last quarter is compared with the
median of the warm-up's second half.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from playground import registry
from playground.errors import PlaygroundError
from playground.metrics import PeakRss, percentile
from playground.spec import RunSpec
from playground.sweep.prompt_sets import SETS
from playground.tools.serve import serve_app

MODELS = ("smollm2-135m", "gemma3-270m")
RSS_RISE_LIMIT = 0.15  # RSS after the warm-up may end at most this much above its value at the warm-up's end
# values drawn for each knob a strategy or cache reads (the registry says which); kept short so a request
# takes seconds, and several per knob so programs of new shapes keep appearing
KNOB_VALUES: dict[str, tuple[Any, ...]] = {
    "temperature": (0.3, 0.7, 1.0, 1.3), "top_k": (0, 20, 50), "top_p": (0.8, 0.95, 1.0),
    "min_p": (0.0, 0.05), "repetition_penalty": (1.0, 1.1, 1.3), "num_beams": (2, 3, 4),
    "length_penalty": (1.0, 0.8), "prompt_lookup": (3, 5, 8), "window": (32, 64, 128, 256),
    "sink_tokens": (2, 4, 8), "cache_bits": (2, 4, 8), "residual_length": (16, 32, 64),
    "penalty_alpha": (0.3, 0.6), "dola_layers": ("low", "high"),
}
PEAK_ROWS = (2, 4, 6)  # a strategy's cache rows at its peak, where a knob sets them
_GENERIC_ERROR = "has not enabled verbose error reporting"  # gradio_client's words for an unexpected exception


@dataclass
class Record:
    """One request as a client saw it."""

    at_s: float  # when it was sent, from the clients' start (the loading requests before it: negative)
    outcome: str  # served, refused, failed or dropped
    latency_s: float
    spec: dict[str, Any]
    message: str = ""


def random_prompt(rng: random.Random) -> str:
    """A shipped prompt, sometimes repeated up to four times, so prompt lengths (and prefill buckets) vary."""
    prompt = rng.choice([p for prompt_set in SETS.values() for p in prompt_set.prompts])
    return "\n\n".join([prompt] * rng.choice((1, 1, 2, 4)))


def random_spec(rng: random.Random) -> dict[str, Any]:
    """A RunSpec (as JSON keys) that RunSpec accepts: a random model, backend, strategy and cache, and a value
    for each knob they read. The app may still refuse it for the model (a sink cache on sliding layers)."""
    while True:
        strategy, cache = rng.choice(registry.strategies()), rng.choice(registry.caches())
        values: dict[str, Any] = {"model": rng.choice(MODELS), "backend": rng.choice(registry.backend_names()),
                                  "strategy": strategy.name, "cache": cache.name, "chat": rng.choice((None, False)),
                                  "max_new_tokens": rng.choice((8, 16, 32, 48)), "seed": rng.randrange(1000)}
        for name in strategy.knobs + cache.knobs:
            if name == strategy.peak_rows_knob:  # a cache row each (contrastive search's candidates): a few
                values[name] = rng.choice(PEAK_ROWS)
            elif name in KNOB_VALUES:
                values[name] = rng.choice(KNOB_VALUES[name])
        if strategy.drafts:
            values["prompt_lookup"] = rng.choice(KNOB_VALUES["prompt_lookup"])
        try:
            RunSpec.from_dict(values)
        except PlaygroundError:
            continue  # a combination RunSpec refuses (say, a window shorter than the sink)
        return values


def _send(client: Any, prompt: str, spec: dict[str, Any], drop_after_s: float | None) -> tuple[str, str]:
    """One request: its outcome and message."""
    from gradio_client.exceptions import AppError

    job = client.submit(prompt, json.dumps(spec), api_name="/run")
    if drop_after_s is not None:
        time.sleep(drop_after_s)
        if not job.done():
            job.cancel()
            return "dropped", ""
    try:
        result = job.result()
    except AppError as exc:
        message = str(exc).splitlines()[0][:200] if str(exc) else ""
        return ("failed", message) if not message or _GENERIC_ERROR in message else ("refused", message)
    except Exception as exc:  # noqa: BLE001 - a broken connection or protocol error is a failure, with its words
        return "failed", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if not result or not result.get("new_tokens"):
        return "failed", "a result without tokens"
    return "served", ""


class RssSeries:
    """The app's resident memory (and its children's) every `interval_s`, as (seconds, bytes) pairs."""

    def __init__(self, pid: int, interval_s: float) -> None:
        self.rss = PeakRss(pid=pid, children=True).rss  # its reading only: this class keeps every sample
        self.interval_s = interval_s
        self.start = time.monotonic()  # moved to the clients' start once the models are loaded
        self.samples: list[tuple[float, int]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((round(time.monotonic() - self.start, 1), self.rss()))
            if self._done.wait(self.interval_s):
                return

    def __enter__(self) -> RssSeries:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def run_soak(url: str, pid: int, minutes: float, clients: int, warmup_minutes: float, drop_share: float = 0.2,
             seed: int = 0, sample_s: float = 5.0, progress: Any = None) -> dict[str, Any]:
    """The soak's report: counts, refusal messages, failures, latency percentiles, RSS over time and the verdict
    (times in seconds from the clients' start; the loading requests before it have negative times)."""
    from gradio_client import Client

    records: list[Record] = []
    lock = threading.Lock()

    def client_loop(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        client = Client(url, verbose=False)
        while time.monotonic() < deadline:
            prompt, spec = random_prompt(rng), random_spec(rng)
            drop = rng.uniform(0.2, 3.0) if rng.random() < drop_share else None
            sent = time.monotonic()
            outcome, message = _send(client, prompt, spec, drop)
            record = Record(round(sent - start, 1), outcome, round(time.monotonic() - sent, 3), spec, message)
            with lock:
                records.append(record)
                if progress and len(records) % 10 == 0:
                    progress(f"{time.monotonic() - start:6.0f} s: {len(records)} requests, "
                             f"{sum(r.outcome == 'failed' for r in records)} failed")

    with RssSeries(pid, sample_s) as rss:
        first = Client(url, verbose=False)
        loading: list[tuple[float, dict[str, Any], str, str, float]] = []
        for model in MODELS:
            for backend in registry.backend_names():
                spec = {"model": model, "backend": backend, "max_new_tokens": 8, "chat": False}
                sent = time.monotonic()
                outcome, message = _send(first, "Hello", spec, None)
                loading.append((sent, spec, outcome, message, time.monotonic() - sent))
        start = time.monotonic()
        deadline = start + minutes * 60
        rss.samples = [(round(t - (start - rss.start), 1), b) for t, b in rss.samples]
        rss.start = start
        records += [Record(round(sent - start, 1), outcome, round(took, 3), spec, message)
                    for sent, spec, outcome, message, took in loading]
        if progress:
            progress(f"models loaded in {start - loading[0][0]:.0f} s; {clients} clients start")
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(client_loop, range(clients)))
        still_answers = _send(first, "The capital of France is", {"max_new_tokens": 4, "chat": False}, None)[0]
    return report(records, rss.samples, warmup_s=warmup_minutes * 60, clients=clients, minutes=minutes,
                  still_answers=still_answers == "served")


def report(records: list[Record], samples: list[tuple[float, int]], warmup_s: float, clients: int, minutes: float,
           still_answers: bool) -> dict[str, Any]:
    """Counts and the RSS verdict: the median of the last quarter of the run against the median of the warm-up's
    second half (times from the clients' start)."""
    outcomes = Counter(r.outcome for r in records)
    served = sorted(r.latency_s for r in records if r.outcome == "served")
    end = samples[-1][0] if samples else 0.0
    at_warmup = statistics.median([b for t, b in samples if warmup_s / 2 <= t <= warmup_s] or [0])
    late = [b for t, b in samples if t > warmup_s and t >= end - (end - warmup_s) / 4]
    after = [b for t, b in samples if t > warmup_s]
    rise = statistics.median(late) / at_warmup - 1 if late and at_warmup else None
    failures = [asdict(r) for r in records if r.outcome == "failed"]
    problems = [f"{len(failures)} failed requests"] if failures else []
    if rise is not None and rise > RSS_RISE_LIMIT:
        problems.append(f"RSS rose {rise:.0%} after the warm-up (limit {RSS_RISE_LIMIT:.0%})")
    if not still_answers:
        problems.append("the app did not answer afterwards")
    if rise is None:
        problems.append("no RSS sample after the warm-up: make the run longer than its warm-up")
    return {
        "minutes": minutes, "clients": clients, "warmup_s": warmup_s, "requests": len(records),
        "served": outcomes["served"], "refused": outcomes["refused"], "dropped": outcomes["dropped"],
        "failed": outcomes["failed"], "failures": failures,
        "refusals": dict(Counter(r.message for r in records if r.outcome == "refused").most_common()),
        "latency_p50_s": percentile(served, 50), "latency_p90_s": percentile(served, 90),
        "latency_p99_s": percentile(served, 99),
        "rss": [[t, b] for t, b in samples], "rss_at_warmup_bytes": int(at_warmup),
        "rss_late_bytes": int(statistics.median(late)) if late else None,
        "rss_max_after_warmup_bytes": max(after) if after else None, "rss_rise": rise,
        "still_answers": still_answers, "problems": problems, "ok": not problems,
    }


def summary(result: dict[str, Any]) -> str:
    """The report in a few lines, with units."""
    mib = 2**20
    rise = "n/a" if result["rss_rise"] is None else f"{result['rss_rise']:+.1%}"
    lines = [f"{result['requests']} requests from {result['clients']} clients in {result['minutes']:g} min: "
             f"{result['served']} served, {result['refused']} refused, {result['dropped']} dropped, "
             f"{result['failed']} failed",
             f"latency of served requests: p50 {result['latency_p50_s'] or 0:.2f} s, "
             f"p90 {result['latency_p90_s'] or 0:.2f} s, p99 {result['latency_p99_s'] or 0:.2f} s",
             f"RSS median over the warm-up's second half (to {result['warmup_s']:.0f} s): "
             f"{result['rss_at_warmup_bytes'] / mib:.0f} MiB; over the run's last quarter: "
             f"{(result['rss_late_bytes'] or 0) / mib:.0f} MiB ({rise}); highest after the warm-up: "
             f"{(result['rss_max_after_warmup_bytes'] or 0) / mib:.0f} MiB",
             "RSS over time (s: MiB): " + ", ".join(f"{t:.0f}: {b / mib:.0f}" for t, b in result["rss"][:: max(
                 1, len(result["rss"]) // 24)])]
    lines += [f"refused x{count}: {message}" for message, count in list(result["refusals"].items())[:8]]
    lines += [f"FAILED: {f['message'] or '(no message)'} for {json.dumps(f['spec'])}" for f in result["failures"][:8]]
    lines.append("ok" if result["ok"] else "PROBLEMS: " + "; ".join(result["problems"]))
    return "\n".join(lines)


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--minutes", type=float, default=3.0, help="how long the clients send (default 3)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4)")
    parser.add_argument("--warmup-minutes", type=float, default=None,
                        help="RSS is judged from this point on (default: a third of --minutes)")
    parser.add_argument("--drop-share", type=float, default=0.2,
                        help="share of requests cancelled mid-stream (default 0.2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--url", help="a running app (then --pid is its process id); default: start one here")
    parser.add_argument("--pid", type=int, help="the running app's process id, for its RSS")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON on stdout")
    return parser


def command_soak(args: argparse.Namespace) -> int:
    """Run the soak as the CLI asked; 0 when it passed, 1 otherwise."""
    if args.minutes <= 0 or args.clients < 1:
        raise PlaygroundError("--minutes must be above 0 and --clients at least 1")
    if args.url is not None and args.pid is None:
        raise PlaygroundError("--url needs --pid, the app's process id, to sample its memory")
    warmup = args.warmup_minutes if args.warmup_minutes is not None else args.minutes / 3

    def progress(message: str) -> None:
        print(message, file=sys.stderr)

    def soak(url: str, pid: int) -> dict[str, Any]:
        return run_soak(url, pid, args.minutes, args.clients, warmup, args.drop_share, args.seed,
                        progress=progress)

    if args.url is None:
        with serve_app() as app:
            result = soak(app.url, app.pid)
    else:
        result = soak(args.url, args.pid)
    print(summary(result), file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    return 0 if result["ok"] else 1

"""Load test: N concurrent gradio_client clients x M requests against a served app, valid and invalid mixed.

`python -m playground.tools.loadtest --clients 8 --requests 5` starts the app on a free loopback port (or uses
--url), prints one human line and a JSON object: served, failures, refusals, p50/p99 latency, peak RSS.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

from playground.metrics import PeakRss, percentile
from playground.tools.serve import serve_app

VALID = [
    ("The capital of France is", {"max_new_tokens": 4, "chat": False}),
    ("What is the capital of France?", {"max_new_tokens": 4}),
    ("Once upon a time", {"max_new_tokens": 4, "strategy": "sampling", "seed": 3, "chat": False}),
]
INVALID = [
    ("", {}),
    ("hi", {"max_new_tokens": 0}),
    ("hi", {"strategy": "nucleus"}),
    ("hi", {"model": "../../etc"}),
]


def one_client(url: str, client_index: int, requests: int) -> list[dict[str, Any]]:
    from gradio_client import Client

    client = Client(url, verbose=False)
    records = []
    for i in range(requests):
        valid = (client_index + i) % 3 != 2  # about one request in three is invalid
        pool = VALID if valid else INVALID
        prompt, spec = pool[(client_index * requests + i) % len(pool)]
        start = time.perf_counter()
        try:
            result = client.predict(prompt, json.dumps(spec), api_name="/run")
            ok, error = bool(result.get("new_tokens")), None
        except Exception as exc:  # noqa: BLE001 - an invalid request must fail; a valid one must not
            ok, error = False, str(exc).splitlines()[0][:200]
        records.append({"valid": valid, "ok": ok, "error": error, "latency_s": time.perf_counter() - start})
    return records


def run_load(url: str, clients: int, requests: int, app_pid: int | None = None) -> dict[str, Any]:
    start = time.perf_counter()
    watcher = PeakRss(interval_s=0.05, pid=app_pid, children=True) if app_pid is not None else None
    with watcher or nullcontext(), ThreadPoolExecutor(clients) as pool:
        batches = list(pool.map(lambda c: one_client(url, c, requests), range(clients)))
    records = [r for batch in batches for r in batch]
    valid = [r for r in records if r["valid"]]
    invalid = [r for r in records if not r["valid"]]
    latencies = [r["latency_s"] for r in valid]
    still_answers = one_client(url, 0, 1)[0]["ok"]
    return {
        "clients": clients, "requests_per_client": requests, "wall_s": round(time.perf_counter() - start, 2),
        "served": sum(r["ok"] for r in valid), "valid_requests": len(valid),
        "failures": [r["error"] for r in valid if not r["ok"]],
        "refused": sum(not r["ok"] for r in invalid), "invalid_requests": len(invalid),
        "accepted_invalid": sum(r["ok"] for r in invalid),
        "latency_p50_s": round(percentile(latencies, 50) or 0, 3),
        "latency_p99_s": round(percentile(latencies, 99) or 0, 3),
        "peak_rss_bytes": (watcher.peak or None) if watcher else None, "still_answers": still_answers,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="a running app; default: start one on a free loopback port")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=5)
    args = parser.parse_args(argv)
    if args.url is None:
        with serve_app() as app:
            report = run_load(app.url, args.clients, args.requests, app.pid)
    else:
        report = run_load(args.url, args.clients, args.requests)
    rss = f"{report['peak_rss_bytes'] / 2**20:.0f} MiB" if report["peak_rss_bytes"] else "n/a"
    print(f"{report['served']}/{report['valid_requests']} valid served, {len(report['failures'])} failed, "
          f"{report['refused']}/{report['invalid_requests']} invalid refused, p50 {report['latency_p50_s']} s, "
          f"p99 {report['latency_p99_s']} s, peak RSS {rss}, still answers: {report['still_answers']}",
          file=sys.stderr)
    print(json.dumps(report))
    ok = not report["failures"] and not report["accepted_invalid"] and report["still_answers"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

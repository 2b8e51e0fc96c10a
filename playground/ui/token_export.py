"""Each token's raw and processed log-probabilities as a download: JSON (with the top alternatives) and CSV.

"raw" is the model's own log-softmax at temperature 1 (`logprob_model`), "processed" the log-probability under
the distribution the token was drawn from, after every stage of the logits chain (`logprob`): vLLM's two
`logprobs_mode`s. A branch's forced tokens come first, with no figures: they were not drawn.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from typing import Any

from playground.result import Result, TokenRecord, log_probability

CSV_COLUMNS = ("column", "label", "position", "forced", "id", "text", "logprob_raw", "logprob_processed",
               "entropy_raw", "entropy_processed")


def _logprobs(token: TokenRecord) -> tuple[float | None, float | None]:
    """(raw, processed): the record's own, or from its rounded p for a Result written before they were kept."""
    raw = token["logprob_model"] if "logprob_model" in token else log_probability(token["p_model"])
    processed = token["logprob"] if "logprob" in token else log_probability(token["p"])
    return raw, processed


def _alternatives(token: TokenRecord) -> list[dict[str, Any]]:
    rows = []
    for alternative in token.get("alternatives") or []:
        rows.append({"id": alternative["id"], "text": alternative["text"],
                     "logprob_raw": alternative.get("logprob_model", log_probability(alternative["p_model"])),
                     "logprob_processed": alternative.get("logprob", log_probability(alternative["p"])),
                     "removed_by_stage": alternative["removed_by"]})
    return rows


def token_rows(result: Result) -> Iterator[dict[str, Any]]:
    """One row per position of the first sequence: the forced prefix (no figures), then each generated token."""
    prefix = result.get("prefix")
    forced = list(zip(prefix["ids"], prefix["pieces"], strict=True)) if prefix else []
    for position, (token_id, piece) in enumerate(forced):
        yield {"position": position, "forced": True, "id": token_id, "text": piece, "logprob_raw": None,
               "logprob_processed": None, "entropy_raw": None, "entropy_processed": None, "top": []}
    for index, token in enumerate(result["tokens"] or []):
        raw, processed = _logprobs(token)
        yield {"position": len(forced) + index, "forced": False, "id": token["id"], "text": token["text"],
               "logprob_raw": raw, "logprob_processed": processed, "entropy_raw": token["entropy_model"],
               "entropy_processed": token["entropy"], "top": _alternatives(token)}


def logprobs_json(results: Sequence[Result | None], labels: Sequence[str]) -> str:
    """Per finished column: its label, model and strategy, and every position's log-probabilities (nats)."""
    columns = [{"column": i + 1, "label": label, "model": r["spec"]["model"], "backend": r["spec"]["backend"],
                "strategy": r["spec"]["strategy"], "tokens": list(token_rows(r))}
               for i, (label, r) in enumerate(zip(labels, results, strict=True)) if r]
    return json.dumps({"units": "natural log", "columns": columns}, indent=1, ensure_ascii=False)


def logprobs_csv(results: Sequence[Result | None], labels: Sequence[str]) -> str:
    """One line per position of each finished column (the alternatives are in the JSON)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for i, (label, result) in enumerate(zip(labels, results, strict=True)):
        if not result:
            continue
        for row in token_rows(result):
            writer.writerow([i + 1, label, row["position"], row["forced"], row["id"], row["text"],
                             *["" if row[k] is None else row[k] for k in
                               ("logprob_raw", "logprob_processed", "entropy_raw", "entropy_processed")]])
    return buffer.getvalue()

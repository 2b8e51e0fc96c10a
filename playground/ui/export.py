"""Reproducibility: page settings as JSON and as a URL token, and results exported as JSON and CSV."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import platform
import shutil
import tempfile
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast

import psutil

from playground.errors import PlaygroundError
from playground.limits import MAX_LINK_PROMPT_CHARS
from playground.result import Result
from playground.spec import RunSpec
from playground.ui.chat import MODES
from playground.ui.columns import MAX_COLUMNS, column_keys, problem, relevant_keys, spec_defaults
from playground.ui.settings import ColumnSettings, PageSettings, page_settings
from playground.ui.token_export import logprobs_csv, logprobs_json

MAX_TOKEN_CHARS = 16_000
# how long an export (and Gradio's served copy of it, see build_ui's delete_cache) is kept
EXPORT_MAX_AGE_S = 3600


def settings_to_json(settings: PageSettings) -> str:
    return json.dumps(settings, indent=1, ensure_ascii=False)


def parse_settings(data: Any) -> PageSettings:
    """Validate pasted or linked settings before anything on the page changes; errors name the fix."""
    if not isinstance(data, Mapping):
        raise PlaygroundError('settings must be a JSON object like {"prompt": ..., "seed": 0, "columns": [{...}]}')
    unknown = sorted(set(data) - {"version", "prompt", "seed", "mode", "repeats", "columns"})
    if unknown:
        raise PlaygroundError(f"unknown settings key(s) {', '.join(unknown)}; "
                              "allowed: prompt, seed, mode, repeats, columns")
    prompt = data.get("prompt", "")
    if not isinstance(prompt, str) or len(prompt) > MAX_LINK_PROMPT_CHARS:
        raise PlaygroundError(f"prompt must be text of at most {MAX_LINK_PROMPT_CHARS} characters")
    seed, repeats = data.get("seed", 0), data.get("repeats", 1)
    RunSpec(seed=seed, repeats=repeats)  # the same range and type checks as a run
    mode = data.get("mode", "auto")
    if mode not in MODES:
        raise PlaygroundError(f"mode {mode!r} is not one of: {', '.join(MODES)}")
    columns = data.get("columns", [{}])
    if not isinstance(columns, list) or not 1 <= len(columns) <= MAX_COLUMNS:
        raise PlaygroundError(f"columns must be a list of 1 to {MAX_COLUMNS} objects of run settings")
    cleaned: list[ColumnSettings] = []
    for number, given in enumerate(columns, start=1):
        if not isinstance(given, Mapping):
            raise PlaygroundError(f"column {number}: must be an object of run settings")
        column = cast(ColumnSettings, dict(given))  # its keys checked next, its values by RunSpec in problem()
        extra = sorted(set(column) - set(column_keys()))
        if extra:
            raise PlaygroundError(f"column {number}: key(s) {', '.join(extra)} cannot be set per column "
                                  f"(seed, repeats and chat are page-wide); allowed: {', '.join(column_keys())}")
        reason = problem(column, check_sources=False)  # the column notice says what this run cannot have
        if reason:
            raise PlaygroundError(f"column {number}: {reason}")
        cleaned.append(column)
    return page_settings(prompt, seed, mode, cleaned, repeats)


def settings_from_json(text: str) -> PageSettings:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise PlaygroundError(f"settings are not valid JSON ({getattr(exc, 'msg', exc)})") from None
    return parse_settings(data)


def encode_url_state(settings: PageSettings) -> str:
    """A compact, URL-safe token: defaults dropped, JSON deflated, base64url without padding."""
    slim: dict[str, Any] = {k: v for k, v in settings.items() if k != "version"}
    defaults = spec_defaults()
    slim["columns"] = [{k: v for k, v in c.items() if k in ("strategy", "cache") or defaults.get(k) != v}
                       for c in settings.get("columns", [])]
    raw = json.dumps(slim, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def decode_url_state(token: str) -> PageSettings:
    """Inverse of encode_url_state, bounded so a crafted link cannot inflate into a huge object."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise PlaygroundError("the link's settings are empty or too long")
    try:
        packed = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, 4 * MAX_LINK_PROMPT_CHARS)
        if inflater.unconsumed_tail:
            raise ValueError("too large")
        data = json.loads(raw)
    except (ValueError, zlib.error):
        raise PlaygroundError("this link is damaged: its settings cannot be read (was it cut short when copied?); "
                              "open the page without the ?s= part, or paste the settings as JSON") from None
    return parse_settings(data)


CSV_METRICS = ("ttft_s", "tokens_per_s", "ms_per_token_p50", "ms_per_token_p90", "compile_s", "load_s", "total_s",
               "kv_cache_bytes", "peak_rss_bytes", "acceptance_rate")
CSV_SPEC = ("model", "weights", "backend", "strategy", "cache", "max_new_tokens", "seed", "chat")


PAGE_WIDE_KEYS = ("seed", "chat", "repeats")


def applied_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Only the RunSpec keys that changed what this column computed, and the page-wide ones."""
    keys = [*relevant_keys(spec["strategy"], spec["cache"], spec["backend"], bool(spec.get("assisted_sampling"))),
            *PAGE_WIDE_KEYS]
    if {"assistant", "prompt_lookup"} <= set(keys):  # one source of drafts: the other key was unused
        keys.remove("assistant" if spec.get("prompt_lookup") else "prompt_lookup")
    return {k: spec[k] for k in keys if k in spec}


def machine() -> dict[str, Any]:
    """Where the figures were measured: they mean little without the cores, the memory and the device."""
    from playground import device

    found = device.current()
    return {"platform": platform.platform(), "processor": device.cpu_name(), "cores": os.cpu_count(),
            "memory_bytes": psutil.virtual_memory().total, "device": found.label,
            "device_memory_bytes": found.memory()[0], "devices": [f"{found.label} (PyTorch and JAX)"]}


def results_json(settings: PageSettings, results: Sequence[Result | None]) -> str:
    """The page settings (the prompt among them), the machine, and every finished column's Result with only the
    knobs that applied to it."""
    done = [{"column": i + 1, **r, "spec": applied_spec(r["spec"])} for i, r in enumerate(results) if r]
    versions = next((r["versions"] for r in results if r), None)
    return json.dumps({"settings": settings, "machine": machine(), "versions": versions, "results": done},
                      indent=1, ensure_ascii=False)


def results_csv(results: Sequence[Result | None], labels: Sequence[str]) -> str:
    """One row per finished column: settings, metrics, text and package versions (spreadsheet-friendly)."""
    done = [(i, label, r) for i, (label, r) in enumerate(zip(labels, results, strict=True)) if r]
    applied = {i: applied_spec(r["spec"]) for i, _, r in done}
    spec_keys = list(CSV_SPEC) + sorted({k for spec in applied.values() for k in spec} - set(CSV_SPEC))
    version_keys = sorted({k for _, _, r in done for k in r["versions"]})
    header = ["column", "label", *spec_keys, "prompt_tokens", "new_tokens", "forward_passes", "stopped",
              *CSV_METRICS, "forced_prefix", "text", *[f"version_{k}" for k in version_keys]]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for index, label, result in done:
        spec, versions = applied[index], result["versions"]
        metrics: Mapping[str, Any] = result["metrics"]
        writer.writerow([index + 1, label, *[_cell(spec.get(k)) for k in spec_keys], result["prompt_tokens"],
                         result["new_tokens"], _cell(result["forward_passes"]), result["stopped"],
                         *[_cell(metrics.get(k)) for k in CSV_METRICS], forced_text(result), result["text"],
                         *[_cell(versions.get(k)) for k in version_keys]])
    return buffer.getvalue()


def forced_text(result: Result) -> str:
    """A branch's forced tokens (the output before them and the chosen alternative): `text` starts after them,
    so without this column a branched row would not say where its text came from."""
    prefix = result.get("prefix")
    return prefix["text"] if prefix else ""


def _cell(value: Any) -> Any:
    return "" if value is None else value


def export_root() -> Path:
    return Path(tempfile.gettempdir()) / "playground-exports"


def delete_old_exports(root: Path, max_age_s: float = EXPORT_MAX_AGE_S) -> None:
    """Remove export folders older than `max_age_s`, so a long-lived Space does not collect one per run."""
    cutoff = time.time() - max_age_s
    for folder in root.glob("export-*"):
        try:
            if folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue  # removed meanwhile by another request


def export_folder() -> tuple[Path, str]:
    """A fresh folder for one export (Gradio serves files by path, so one user's download never shows another's)
    and a time stamp for its file names; folders older than EXPORT_MAX_AGE_S go first."""
    root = export_root()
    root.mkdir(parents=True, exist_ok=True)
    delete_old_exports(root)
    return Path(tempfile.mkdtemp(prefix="export-", dir=root)), time.strftime("%Y%m%d-%H%M%S")


class Exports(NamedTuple):
    """One export's files: the results, and each token's log-probabilities."""

    json: Path
    csv: Path
    logprobs_json: Path
    logprobs_csv: Path


def write_exports(settings: PageSettings, results: Sequence[Result | None], labels: Sequence[str]) -> Exports:
    """Fresh files per export (Gradio serves them by path, so one user's download never shows another's);
    folders older than EXPORT_MAX_AGE_S go on each export (Gradio's copies go with the page's delete_cache)."""
    folder, stamp = export_folder()
    texts = {"json": (f"decoding-playground-{stamp}.json", results_json(settings, results)),
             "csv": (f"decoding-playground-{stamp}.csv", results_csv(results, labels)),
             "logprobs_json": (f"token-logprobs-{stamp}.json", logprobs_json(results, labels)),
             "logprobs_csv": (f"token-logprobs-{stamp}.csv", logprobs_csv(results, labels))}
    for name, text in texts.values():
        (folder / name).write_text(text, encoding="utf-8")
    return Exports(**{key: folder / name for key, (name, _) in texts.items()})

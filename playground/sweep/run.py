"""A sweep: one knob over several values, on a set of prompts and seeds, with a row per run and the medians.

Every value's spec is built (and so validated) before anything runs, and the sweep's total tokens are checked
against its cap, so bad input costs nothing. Each prompt also gets one reference run, greedy with fp32
weights and the dynamic cache on the same backend, for the agreement measure (the share of it an output
reproduces before its first difference). Runs go through the runner,
one at a time, as requests do: a stop ends the run under way and keeps the rows that finished.
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from playground import limits, registry, runner
from playground.errors import PlaygroundError
from playground.events import DoneEvent
from playground.generation_slot import Holder
from playground.result import Result
from playground.spec import RunSpec
from playground.sweep import measures, prompt_sets
from playground.sweep.knobs import KnobValue, parse_values

MAX_SEEDS = 8
MEASURES = ("distinct_1", "distinct_2", "repeat_4gram_rate", "mean_logprob", "agreement", "first_divergence",
            "tokens_per_pass", "returned_overlap")

Progress = Callable[[int, int, str], object]  # (runs done, runs in all, what runs next)
RowDone = Callable[[dict[str, Any], Result], object]  # a finished row and its run's full Result (token records)


# new tokens one sweep may ask for in all. SmolLM2 decodes 30-45 tok/s on 2 cores, so locally up to about
# 45 minutes; on a public Space a sweep holds the one queue slot while it runs, so about 2 minutes there.
SWEEP_TOKENS, PUBLIC_SWEEP_TOKENS = 100_000, 5_000


def max_sweep_tokens() -> int:
    """PLAYGROUND_MAX_SWEEP_TOKENS, else the local or the public default."""
    configured = os.environ.get("PLAYGROUND_MAX_SWEEP_TOKENS", "").strip()
    if configured:
        return int(configured)
    return PUBLIC_SWEEP_TOKENS if limits.is_public() else SWEEP_TOKENS


@dataclass(frozen=True)
class Sweep:
    """What to run: the base spec with `knob` set to each value, on every prompt, with `seeds` seeds when the
    strategy samples (one run per prompt otherwise: a deterministic run repeated shows nothing new)."""

    knob: str
    values: tuple[KnobValue, ...]
    spec: RunSpec
    prompts: tuple[str, ...]
    seeds: int = 1

    @classmethod
    def over(cls, knob: str, values: tuple[KnobValue, ...], base: dict[str, Any], prompts: tuple[str, ...],
             seeds: int = 1) -> Sweep:
        """The sweep of `knob` over `values` from the run settings `base`. The base spec holds the first value,
        so a knob the strategy needs (prompt_lookup) is never its refused default."""
        return cls(knob, values, RunSpec.from_dict({**base, knob: values[0]}), prompts, seeds)

    def checked_specs(self) -> list[RunSpec]:
        """The spec of each value, validated (a value the spec refuses is named in the error), once the sweep's
        new tokens are known to fit its cap: what is checked before anything runs."""
        specs = self._specs()
        planned, cap = self.planned_tokens(specs), max_sweep_tokens()
        if planned > cap:
            raise PlaygroundError(f"this sweep asks for up to {planned} new tokens in all, over the limit of {cap} "
                                  "(PLAYGROUND_MAX_SWEEP_TOKENS): use fewer values, prompts or seeds, or lower "
                                  "max_new_tokens")
        return specs

    def _specs(self) -> list[RunSpec]:
        if not 1 <= self.seeds <= MAX_SEEDS:
            raise PlaygroundError(f"seeds must be 1 to {MAX_SEEDS}, got {self.seeds}")
        built = []
        for value in self.values:
            try:
                built.append(self.spec.replace(**{self.knob: value}))
            except PlaygroundError as exc:
                raise PlaygroundError(f"{self.knob}={value}: {exc}") from None
        return built

    def seed_list(self) -> list[int]:
        samples = registry.strategy(self.spec.strategy).samples(self.spec.assisted_sampling)
        return [self.spec.seed + i for i in range(self.seeds)] if samples else [self.spec.seed]

    def reference(self, specs: Sequence[RunSpec]) -> RunSpec:
        """Greedy, fp32, the dynamic cache, as long as the longest value's run."""
        s = self.spec
        return RunSpec(model=s.model, backend=s.backend, max_new_tokens=max(x.max_new_tokens for x in specs),
                       chat=s.chat, devices=s.devices)

    def planned_tokens(self, specs: Sequence[RunSpec]) -> int:
        runs = sum(x.max_new_tokens * x.num_return_sequences for x in specs) * len(self.prompts) * len(self.seed_list())
        return runs + self.reference(specs).max_new_tokens * len(self.prompts)


def sweep_from_json(prompts: str, text: str) -> Sweep:
    """The API's request: `prompts` is a shipped set's name or one prompt per line; `text` is a JSON object
    {"knob", "values" (a list, or a comma-separated string), "spec" (RunSpec keys), "seeds"}."""
    try:
        data = json.loads(text or "")
    except json.JSONDecodeError as exc:
        example = '{"knob": "temperature", "values": [0.2, 1.0], "spec": {"strategy": "sampling"}}'
        raise PlaygroundError(f"sweep is not valid JSON ({exc.msg}); send an object such as {example}") from None
    if not isinstance(data, dict):
        raise PlaygroundError(f"sweep must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - {"knob", "values", "spec", "seeds"})
    if unknown or "knob" not in data or "values" not in data:
        raise PlaygroundError(f"sweep takes the keys knob, values, spec and seeds (knob and values required)"
                              f"{'; unknown: ' + ', '.join(unknown) if unknown else ''}")
    values = data["values"]
    written = ",".join(str(v) for v in values) if isinstance(values, list) else str(values)
    seeds = data.get("seeds", 1)
    if not isinstance(seeds, int) or isinstance(seeds, bool):
        raise PlaygroundError(f"seeds must be a whole number, got {seeds!r}")
    chosen = prompts.strip()
    found = prompt_sets.prompt_set(chosen) if chosen in prompt_sets.SETS else prompt_sets.pasted_prompts(prompts)
    knob = str(data["knob"])
    values = parse_values(knob, written)
    spec = data.get("spec") or {}
    if not isinstance(spec, dict):
        raise PlaygroundError(f"spec must be a JSON object of run settings, got {type(spec).__name__}")
    return Sweep.over(knob, values, spec, found, seeds)


def _one_run(prompt: str, spec: RunSpec, should_stop: Callable[[], bool], holder: Holder) -> Result | None:
    """A finished run's Result; None when a stop cut it short."""
    for event in runner.run(prompt, spec, should_stop, holder=holder):
        if isinstance(event, DoneEvent):
            return None if event.result["stopped"] else event.result
    raise RuntimeError("run ended without a result")


def _row_measures(result: Result, reference: Result) -> dict[str, float | int | None]:
    ids = result["token_ids"]
    share, first = measures.agreement(ids, reference["token_ids"])
    passes = result["forward_passes"]
    return {"distinct_1": measures.distinct_n(ids, 1), "distinct_2": measures.distinct_n(ids, 2),
            "repeat_4gram_rate": measures.repeated_ngram_rate(ids, 4),
            "mean_logprob": result["metrics"]["mean_logprob"], "agreement": share, "first_divergence": first,
            "tokens_per_pass": result["new_tokens"] / passes if passes else None,
            "returned_overlap": measures.returned_overlap(result["sequences"])}


def run_sweep(sweep: Sweep, should_stop: Callable[[], bool] = lambda: False,
              progress: Progress = lambda done, total, what: None,
              row_done: RowDone = lambda row, result: None, holder: Holder | None = None) -> dict[str, Any]:
    """The sweep's JSON object: a row per (value, prompt, seed) that finished, and per-value aggregates;
    `row_done` sees each row as it finishes (the page draws the curves as they grow). Its runs hold the generation
    slot as pieces of long work (`holder` names it to those who wait): a short request goes between two of them."""
    holder = holder or Holder("a sweep", yields=True)
    specs = sweep.checked_specs()
    seeds = sweep.seed_list()
    total = len(sweep.prompts) * (1 + len(specs) * len(seeds))
    done, compiles, stopped = 0, 0, False
    references: list[Result] = []
    rows: list[dict[str, Any]] = []
    order: list[tuple[int, int | None, int]] = [(i, None, 0) for i in range(len(sweep.prompts))]  # references first
    order += [(i, v, seed) for v in range(len(specs)) for i in range(len(sweep.prompts)) for seed in seeds]
    for prompt_index, value_index, seed in order:
        if should_stop():
            stopped = True
            break
        spec = sweep.reference(specs) if value_index is None else specs[value_index].replace(seed=seed)
        what = ("reference (greedy, fp32, dynamic)" if value_index is None
                else f"{sweep.knob}={sweep.values[value_index]}, seed {seed}")
        progress(done, total, f"prompt {prompt_index + 1} of {len(sweep.prompts)}: {what}")
        result = _one_run(sweep.prompts[prompt_index], spec, should_stop, holder)
        if result is None:
            stopped = True
            break
        done += 1
        compiles += result["metrics"]["compile_s"] > 0
        if value_index is None:
            references.append(result)
            continue
        rows.append({"value": sweep.values[value_index], "prompt_index": prompt_index, "seed": seed,
                     "text": result["text"], "token_ids": result["token_ids"], "metrics": result["metrics"],
                     "measures": _row_measures(result, references[prompt_index])})
        row_done(rows[-1], result)
    progress(done, total, "stopped" if stopped else "done")
    return {"knob": sweep.knob, "values": list(sweep.values), "base_spec": sweep.spec.to_dict(),
            "prompts": list(sweep.prompts), "seeds": seeds, "rows": rows,
            "aggregates": aggregates(sweep.values, rows), "compiles": compiles, "stopped": stopped}


def _median_spread(values: Sequence[float | int | None]) -> tuple[float | None, float | None]:
    """Median and spread (largest minus smallest) of the values that exist."""
    present = [float(v) for v in values if v is not None]
    return (statistics.median(present), max(present) - min(present)) if present else (None, None)


def aggregates(values: Sequence[KnobValue], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per value that has rows: each measure's median and spread, the speed and memory medians, the seconds
    spent compiling, and the self-similarity of each prompt's seeds (median over prompts)."""
    out = []
    for value in values:
        mine = [r for r in rows if r["value"] == value]
        if not mine:
            continue
        entry: dict[str, Any] = {"value": value, "rows": len(mine)}
        for name in MEASURES:
            entry[f"{name}_median"], entry[f"{name}_spread"] = _median_spread([r["measures"].get(name) for r in mine])
        for name in ("tokens_per_s", "ttft_s", "kv_cache_bytes", "acceptance_rate"):
            entry[f"{name}_median"] = _median_spread([r["metrics"][name] for r in mine])[0]
        entry["compile_s_total"] = sum(r["metrics"]["compile_s"] for r in mine)
        by_prompt: dict[int, list[list[int]]] = {}
        for r in mine:
            by_prompt.setdefault(r["prompt_index"], []).append(r["token_ids"])
        similar = [measures.self_similarity(samples) for samples in by_prompt.values()]
        entry["self_similarity_median"] = _median_spread(similar)[0]
        out.append(entry)
    return out


def to_csv(sweep: dict[str, Any]) -> str:
    """One line per row: the value, prompt and seed, the Result's scalar metrics, the measures and the text."""
    metric_names = sorted({k for r in sweep["rows"] for k, v in r["metrics"].items()
                           if not isinstance(v, list) and k not in MEASURES})  # mean_logprob is both
    header = ["value", "prompt_index", "seed", *metric_names, *MEASURES, "text"]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for r in sweep["rows"]:
        writer.writerow([r["value"], r["prompt_index"], r["seed"], *(r["metrics"].get(k) for k in metric_names),
                         *(r["measures"].get(k) for k in MEASURES), r["text"]])
    return buffer.getvalue()


def format_table(sweep: dict[str, Any]) -> str:
    """The aggregates as a plain table, for the terminal: `prefix` is the agreement (the share of the greedy
    reference reproduced before the first difference), `seed LCS` the self-similarity of the seeds, `returned` the
    overlap of the sequences one run returns (beam-type strategies)."""
    columns = [("value", "value", "{}"), ("rows", "rows", "{}"), ("tok/s", "tokens_per_s_median", "{:.1f}"),
               ("KV MB", "kv_cache_bytes_median", "{:.2f}"), ("distinct-2", "distinct_2_median", "{:.3f}"),
               ("rep-4", "repeat_4gram_rate_median", "{:.3f}"), ("logprob", "mean_logprob_median", "{:.3f}"),
               ("prefix", "agreement_median", "{:.3f}"), ("seed LCS", "self_similarity_median", "{:.3f}"),
               ("returned", "returned_overlap_median", "{:.3f}"), ("compile s", "compile_s_total", "{:.1f}")]
    lines = ["  ".join(f"{title:>10}" for title, _, _ in columns)]
    for entry in sweep["aggregates"]:
        cells = []
        for _, key, form in columns:
            value = entry.get(key)
            if key == "kv_cache_bytes_median" and value is not None:
                value = value / 1e6
            cells.append(f"{'-' if value is None else form.format(value):>10}")
        lines.append("  ".join(cells))
    note = " (stopped: the rows that finished)" if sweep["stopped"] else ""
    lines.append(f"{sweep['knob']} over {len(sweep['values'])} values, {len(sweep['prompts'])} prompts, seeds "
                 f"{sweep['seeds']}: {len(sweep['rows'])} rows, {sweep['compiles']} runs compiled{note}")
    return "\n".join(lines)

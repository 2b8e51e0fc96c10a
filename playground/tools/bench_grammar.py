"""`bench --suite grammar`: the grammar engines for constrained decoding (llguidance, xgrammar), measured on the
bundled tokenizers to pick one (docs/benchmarks.md): building each engine's tokenizer index; compiling grammars, small
and large (the growth a public deployment's caps bound); the first and later token masks while a valid output is fed
token by token, each token checked against the mask filled before it; rolling back ROLLBACK tokens and replaying
them. Both engines fill one NumPy int32 bitmask (xgrammar reads it by DLPack), as a JAX host would send it.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import random
import statistics
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from playground.device import cpu_name
from playground.errors import PlaygroundError
from playground.metrics import percentile

ENGINES = ("llguidance", "xgrammar")
TOKENIZERS = ("smollm2-135m", "gemma3-270m")
ROUNDS, ROLLBACK = 3, 3  # timed rounds (medians); tokens a rollback takes back
# [0-9], not \d: llguidance's \d is Unicode (it admits the lead bytes of Arabic-Indic digits), xgrammar's ASCII
ARITHMETIC = {"lark": 'start: expr\nexpr: term (("+" | "-") term)*\nterm: factor (("*" | "/") factor)*\n'
                      'factor: NUMBER | "(" expr ")"\nNUMBER: /[0-9]+/\n',
              "ebnf": 'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
                      'factor ::= [0-9]+ | "(" expr ")"\n'}


@dataclass(frozen=True)
class Case:
    """One grammar: kind is regex, json (source: a JSON schema) or grammar (source: {"lark": .., "ebnf": ..})."""

    name: str
    kind: str
    source: Any
    sample: str  # a string the grammar accepts, walked token by token


def cases(large: bool = True) -> list[Case]:
    """The small grammars a request would send; then (large) the ones that show compile-time growth."""
    fields = {"name": {"type": "string"}, "age": {"type": "integer"}, "score": {"type": "number"},
              "status": {"enum": ["active", "inactive", "banned"]},
              "tags": {"type": "array", "items": {"type": "string"}}, "admin": {"type": "boolean"}}
    person = {"type": "object", "properties": fields, "required": list(fields), "additionalProperties": False}
    ada = {"name": "Ada", "age": 36, "score": 9.5, "status": "active", "tags": ["math", "engines"], "admin": False}
    found = [Case("date", "regex", "[0-9]{4}-[0-9]{2}-[0-9]{2}", "2026-11-28"),
             Case("email", "regex", r"[a-z0-9._]+@[a-z0-9-]+(\.[a-z0-9-]+)+", "ada.lovelace@example.org"),
             Case("json-6", "json", person, json.dumps(ada, separators=(",", ":"))),
             Case("choice-5", "regex", "(positive|negative|neutral|mixed|unknown)", "neutral"),
             Case("arithmetic", "grammar", ARITHMETIC, "(12+3)*4-5/6")]
    return found + (large_cases() if large else [])


def large_cases() -> list[Case]:
    """Wide objects of string/integer/boolean fields; choices among distinct seeded pseudo-words."""
    found, kinds = [], (("string", "text"), ("integer", 42), ("boolean", True))
    for size in (200, 1000):
        names = [f"field_{i}" for i in range(size)]
        schema = {"type": "object", "properties": {n: {"type": kinds[i % 3][0]} for i, n in enumerate(names)},
                  "required": names, "additionalProperties": False}
        sample = json.dumps({n: kinds[i % 3][1] for i, n in enumerate(names)}, separators=(",", ":"))
        found.append(Case(f"json-{size}", "json", schema, sample))
    rng, words = random.Random(0), set[str]()
    for size in (2000, 20000):
        while len(words) < size:
            words.add("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 10))))
        ordered = sorted(words)
        found.append(Case(f"choice-{size}", "regex", f"({'|'.join(ordered)})", ordered[size // 2]))
    return found


@dataclass(frozen=True)
class Engine:
    """One engine set up on one tokenizer, as the calls a walk makes (a matcher is the engine's own object)."""

    vocab_size: int
    compile: Callable[[Case], Any]
    fill: Callable[[Any, np.ndarray], Any]
    consume: Callable[[Any, int], bool]
    rollback: Callable[[Any, int], Any]  # False (llguidance) or raising (xgrammar): it failed
    accepting: Callable[[Any], bool]


def llguidance_engine(tokenizer: Any) -> Engine:
    """llguidance (MIT): compiling is cheap because its lexer builds states lazily, during the first masks."""
    import llguidance.hf
    import llguidance.numpy

    index, matcher_type = llguidance.hf.from_tokenizer(tokenizer), llguidance.LLMatcher

    def compile_case(case: Case) -> Any:
        grammar = (matcher_type.grammar_from_regex(case.source) if case.kind == "regex" else
                   matcher_type.grammar_from_json_schema(case.source) if case.kind == "json" else
                   matcher_type.grammar_from_lark(case.source["lark"]))
        matcher = matcher_type(index, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return matcher

    return Engine(index.vocab_size, compile_case, llguidance.numpy.fill_next_token_bitmask,
                  lambda m, token: m.consume_token(token), lambda m, n: m.rollback(n), lambda m: m.is_accepting())


def xgrammar_engine(tokenizer: Any) -> Engine:
    """xgrammar (Apache-2.0): compiles against the whole vocabulary ahead of time (no cache: each compile cold)."""
    import xgrammar

    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer)
    compiler = xgrammar.GrammarCompiler(info, max_threads=len(os.sched_getaffinity(0)), cache_enabled=False)

    def compile_case(case: Case) -> Any:
        return xgrammar.GrammarMatcher(
            compiler.compile_regex(case.source) if case.kind == "regex" else
            compiler.compile_json_schema(json.dumps(case.source)) if case.kind == "json" else
            compiler.compile_grammar(case.source["ebnf"]))

    return Engine(info.vocab_size, compile_case, lambda m, mask: m.fill_next_token_bitmask(mask),
                  lambda m, token: m.accept_token(token), lambda m, n: m.rollback(n), lambda m: m.is_completed())


ENGINE_TYPES: dict[str, Callable[[Any], Engine]] = {"llguidance": llguidance_engine, "xgrammar": xgrammar_engine}


def timed(call: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """The call's result and its wall time in ms."""
    start = time.perf_counter()
    found = call(*args)
    return found, (time.perf_counter() - start) * 1e3


def walk(engine: Engine, matcher: Any, tokens: Sequence[int]) -> dict[str, Any]:
    """Fill the mask before each token and check that it allows the token; after each token, roll back ROLLBACK
    tokens and replay them (leaving the state it found). Times in ms; `failure`: the first step that went wrong."""
    mask = np.full((1, (engine.vocab_size + 31) // 32), -1, dtype=np.int32)
    done: dict[str, Any] = {"masks": [], "rollbacks": [], "replays": [], "failure": None, "accepting": False}
    for step, token in enumerate(tokens):
        done["masks"].append(timed(engine.fill, matcher, mask)[1])
        if not (int(mask[0, token >> 5]) >> (token & 31)) & 1:
            done["failure"] = f"step {step}: the mask refuses token {token}"
        elif not engine.consume(matcher, token):
            done["failure"] = f"step {step}: the matcher refuses token {token}"
        elif step + 1 >= ROLLBACK:
            rolled, ms = timed(engine.rollback, matcher, ROLLBACK)
            done["rollbacks"].append(ms)
            start = time.perf_counter()
            replayed = [engine.consume(matcher, t) for t in tokens[step + 1 - ROLLBACK:step + 1]]
            done["replays"].append((time.perf_counter() - start) * 1e3)
            if rolled is False or not all(replayed):
                done["failure"] = f"step {step}: rolling back or replaying {ROLLBACK} tokens failed"
        if done["failure"]:
            return done
    done["accepting"] = engine.accepting(matcher)
    return done


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def measure_case(engine: Engine, tokenizer: Any, case: Case, rounds: int) -> dict[str, Any]:
    """Compile `rounds` times, walk the sample `rounds` times; an engine's refusal is reported, not raised."""
    tokens = tokenizer.encode(case.sample, add_special_tokens=False)
    row: dict[str, Any] = {"grammar": case.name, "kind": case.kind, "tokens": len(tokens)}
    try:
        compiles = [timed(engine.compile, case)[1] for _ in range(rounds)]
        walks = [walk(engine, engine.compile(case), tokens) for _ in range(rounds)]
    except Exception as error:  # an engine refusing a grammar is a finding of the benchmark
        return {**row, "error": f"{type(error).__name__}: {error}"}
    later = [ms for w in walks for ms in w["masks"][1:]]  # the first apart: llguidance builds lexer states there
    p90 = percentile(later, 90)
    failure = next((w["failure"] for w in walks if w["failure"]), None)
    return {**row, "compile_ms": _median(compiles), "first_mask_ms": _median([w["masks"][0] for w in walks]),
            "mask_ms": _median(later), "mask_p90_ms": None if p90 is None else round(p90, 4),
            "rollback_ms": _median([ms for w in walks for ms in w["rollbacks"]]),
            "replay_ms": _median([ms for w in walks for ms in w["replays"]]),
            "masks_ok": failure is None, "accepting": all(w["accepting"] for w in walks), "failure": failure}


def measure_engine(name: str, tokenizer: Any, grammar_cases: Sequence[Case], rounds: int = ROUNDS,
                   progress: Callable[[str], Any] = lambda _: None) -> dict[str, Any]:
    """Set the engine up on `tokenizer` `rounds` times (median), then measure every case."""
    setups = [timed(ENGINE_TYPES[name], tokenizer) for _ in range(max(rounds, 1))]
    engine, rows = setups[-1][0], []
    for case in grammar_cases:
        progress(f"{name}: {case.name}")
        rows.append(measure_case(engine, tokenizer, case, rounds))
    return {"engine": name, "vocab_size": engine.vocab_size, "setup_ms": _median([t for _, t in setups]), "cases": rows}


def load_tokenizer(model: str) -> Any:
    """A bundled model's tokenizer from its converted folder (converting the GGUF first if it never was)."""
    from transformers import AutoTokenizer

    from playground.models.catalog import BUNDLED
    from playground.models.convert import convert_gguf, no_progress

    if model not in BUNDLED:
        raise PlaygroundError(f"bench --suite grammar reads a bundled model's tokenizer; got {model!r}, use one of "
                              f"{', '.join(BUNDLED)}")
    return AutoTokenizer.from_pretrained(convert_gguf(model, BUNDLED[model].gguf_path, no_progress))


def run_grammar_suite(progress: Callable[[str], Any], models: Sequence[str] = TOKENIZERS,
                      rounds: int = ROUNDS) -> dict[str, Any]:
    """Every engine this process imports on every named bundled model's tokenizer; the others, with why not."""
    engines, skipped = {}, {}
    for name in ENGINES:
        try:
            importlib.import_module(name)
            engines[name] = importlib.metadata.version(name)
        except Exception as error:  # not installed, or a wheel that does not load here: reported, not raised
            skipped[name] = f"{type(error).__name__}: {error}"
    tokenizers = []
    for model in models:
        progress(f"tokenizer of {model}")
        tokenizer = load_tokenizer(model)
        runs = [measure_engine(name, tokenizer, cases(), rounds, progress) for name in engines]
        tokenizers.append({"tokenizer": model, "vocab": len(tokenizer), "engines": runs})
    return {"cpu": cpu_name(), "cpus": len(os.sched_getaffinity(0)), "rounds": rounds, "rollback_tokens": ROLLBACK,
            "engines": engines, "skipped": skipped, "tokenizers": tokenizers}


def format_table(result: dict[str, Any]) -> str:
    """A Markdown table: a row per tokenizer x engine x grammar; ms, medians (p90: of the per-step masks)."""
    def shown(value: Any) -> str:
        return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)

    k = result["rollback_tokens"]
    lines = [f"{result['cpu']}, {result['cpus']} CPUs; " + ", ".join(f"{n} {v}" for n, v in result["engines"].items())
             + "".join(f"; {n} skipped ({why})" for n, why in result["skipped"].items()), "",
             "| tokenizer | engine | setup ms | grammar | tokens | compile ms | 1st mask ms | mask ms | mask p90 ms |"
             f" rollback {k} ms | replay {k} ms | masks ok |", "|---|---|---:|---|" + "---:|" * 7 + "---|"]
    for block in result["tokenizers"]:
        for run in block["engines"]:
            for row in run["cases"]:
                ok = row.get("error") or ("yes" if row["masks_ok"] and row["accepting"] else
                                          row["failure"] or "not accepting at the end")
                times = " | ".join(shown(row.get(c)) for c in ("compile_ms", "first_mask_ms", "mask_ms", "mask_p90_ms",
                                                               "rollback_ms", "replay_ms"))
                lines.append(f"| {block['tokenizer']} | {run['engine']} | {shown(run['setup_ms'])} | {row['grammar']}"
                             f" | {row['tokens']} | {times} | {ok} |")
    return "\n".join(lines)

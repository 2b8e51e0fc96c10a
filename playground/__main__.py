"""CLI: `python -m playground run|chain|sweep|bench|context|models|serve`; bad input exits 2 with one `error:`
line, never a traceback."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from playground import device, host, limits, registry, sampler_lab
from playground.data.text_files import read_text_file
from playground.errors import PlaygroundError
from playground.metrics import busy_note
from playground.models import catalog, paths
from playground.spec import WEIGHTS, RunSpec, spec_keys
from playground.sweep.knobs import sweepable
from playground.sweep.prompt_sets import SETS


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage before its error; the contract is a single `error:` line on stderr."""

    def error(self, message: str) -> NoReturn:
        fail(message)


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _choices() -> dict[str, tuple[str, ...]]:
    """The names each choice flag takes, read when the parser is built (entries can be registered until then)."""
    return {"strategy": registry.strategy_names(), "cache": registry.cache_names(), "backend": registry.backend_names(),
            "weights": WEIGHTS}


def build_parser() -> argparse.ArgumentParser:
    # `playground` when run as the console script, else as the contract spells it
    prog = "playground" if Path(sys.argv[0]).name == "playground" else "python -m playground"
    parser = OneLineParser(prog=prog, description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    run = commands.add_parser("run", help="generate once and print the text, or the Result JSON with --json")
    _add_prompt_options(run)
    _add_spec_options(run)
    _add_constraint_options(run)
    run.add_argument("--json", action="store_true", help="print the Result JSON object")

    _add_chain_options(commands.add_parser(
        "chain", help="the sampler lab: a distribution you give through the logits chain, each stage's kept and "
                      "removed tokens and the final distribution"))

    _add_sweep_options(commands.add_parser(
        "sweep", help="run one knob over several values on a set of prompts: a row per run and per-value medians of "
                      "speed, memory and text measures"))

    from playground.tools import bench_command

    bench_command.build_parser(commands.add_parser(
        "bench", help="measure torch and JAX decode speed against the roofline"))

    _add_context_command(commands)
    commands.add_parser("models", help="list the model catalog")
    _add_serve_options(commands.add_parser(
        "serve", help="serve the page and the OpenAI-compatible API (/v1) on one server"))
    from playground.tools import soak

    soak.build_parser(commands.add_parser(
        "soak", help="serve the app and send it random valid requests from several clients for some minutes; "
                     "fails on a failed request or on memory still rising after the warm-up"))
    return parser


def _add_sweep_options(sweep: argparse.ArgumentParser) -> None:
    sweep.add_argument("--knob", choices=sweepable(), help="the RunSpec knob to move")
    sweep.add_argument("--values", help="its values, comma-separated, e.g. 0.2,0.7,1.2")
    sweep.add_argument("--prompt-set", default=None, help="a shipped prompt set (see --list-prompt-sets; "
                                                           "default: stories)")
    sweep.add_argument("--prompts-file", default=None, metavar="FILE", help="your own prompts, one per line")
    sweep.add_argument("--seeds", type=int, default=1,
                       help="seeds per prompt when the strategy samples (default 1; deterministic runs use one)")
    sweep.add_argument("--list-prompt-sets", action="store_true", help="name the shipped prompt sets and stop")
    sweep.add_argument("--csv", default=None, metavar="FILE", help="also write the rows to FILE as CSV")
    sweep.add_argument("--json", action="store_true", help="print the sweep's JSON object")
    _add_spec_options(sweep)


def _add_prompt_options(command: argparse.ArgumentParser) -> None:
    given = command.add_mutually_exclusive_group(required=True)
    given.add_argument("--prompt", help="text to continue (or the user turn, in chat mode)")
    given.add_argument("--prompt-file", metavar="FILE",
                       help="the prompt from a UTF-8 text file (at most PLAYGROUND_MAX_PROMPT_TOKENS tokens)")


def _add_context_command(commands: argparse._SubParsersAction) -> None:
    from playground.context import measure as context
    from playground.context.request import spec_keys as context_keys

    command = commands.add_parser("context", help="what each KV cache costs and loses as the context grows, on a "
                                                  "long text: speed per context length, and quality against the full "
                                                  "cache (perplexity, KL, top-1 agreement)")
    context.add_arguments(command)
    _add_spec_options(command, context_keys())


def _add_chain_options(lab: argparse.ArgumentParser) -> None:
    given = lab.add_mutually_exclusive_group(required=True)
    given.add_argument("--probs", metavar="P1,P2,...", help="the distribution as probabilities (normalised; 0: an "
                                                             "entry already removed)")
    given.add_argument("--logits", metavar="L1,L2,...", help="the distribution as logits (-inf: an entry already "
                                                              "removed)")
    lab.add_argument("--history", default="", metavar="IDS", help="the token ids generated so far, comma-separated "
                                                                  "(the penalties and DRY read them)")
    lab.add_argument("--dry-breaker-ids", default="", metavar="IDS",
                     help="DRY's sequence breakers as token ids (there is no tokenizer here; default: none)")
    lab.add_argument("--backend", choices=sampler_lab.lab_backends(), default="torch", help="default: torch")
    _add_spec_options(lab, sampler_lab.lab_knobs(),
                      note="every stage is off unless one of its knobs is given; temperature 1")
    lab.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _add_serve_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--host", default=None,
                       help="address to listen on (default: GRADIO_SERVER_NAME, else 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None,
                       help="port (default: GRADIO_SERVER_PORT, else 7860 or the next free one)")


def _add_spec_options(command: argparse.ArgumentParser, names: Sequence[str] | None = None, note: str = "") -> None:
    """A --flag per spec key (RunSpec's fields and any knob registered beyond them, or only `names`), typed and
    explained by the key's registry record; `note` replaces the defaults' mention."""
    for name in spec_keys() if names is None else names:
        flag = "--" + name.replace("_", "-")
        knob = registry.knob(name) if registry.has_knob(name) else None
        if name == "chat":
            command.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                                 help="apply the chat template (default: when the model is an instruct model)")
        elif name == "prefix_ids":
            command.add_argument(flag, type=_token_ids, default=None, metavar="ID,ID,...",
                                 help="token ids forced after the prompt; generation continues from the last of them")
        elif name == "assistant":
            command.add_argument(flag, default=None, metavar="MODEL", help="assisted decoding: draft model")
        elif name == "torch_compile":  # a bare --torch-compile asks for the default mode
            modes = registry.knob(name).choices
            command.add_argument(flag, nargs="?", const="default", default=None, choices=modes, metavar="MODE",
                                 help=f"{registry.knob(name).help}; MODE: {', '.join(modes)} (bare: default)")
        elif knob is not None and knob.kind is bool:  # a flag on by default is turned off with --no-<flag>
            action = argparse.BooleanOptionalAction if knob.default else "store_true"
            command.add_argument(flag, action=action, default=None, help=knob.help or None)
        elif knob is not None:
            shown = f"{knob.help}; " if knob.help else ""
            command.add_argument(flag, type=knob.kind, default=None,
                                 help=f"{shown}{note or f'default: {knob.default!r}'}")
        else:
            command.add_argument(flag, default=None, choices=_choices().get(name),
                                 help=f"default: {getattr(RunSpec(), name)}")


# the constraint's own flags: each sets `constraint` to its kind and `constraint_text` to its text
CONSTRAINT_FLAGS = {"regex": "the output must match this regex as a whole (Rust syntax)",
                    "json_schema": "the output must be JSON valid against this schema: JSON text, or a file holding it",
                    "choices": "the output must be one of these: one per line, or |-separated",
                    "grammar": "the output must parse under this Lark grammar file (start rule: start)"}


def _add_constraint_options(command: argparse.ArgumentParser) -> None:
    group = command.add_mutually_exclusive_group()
    for name, help in CONSTRAINT_FLAGS.items():
        group.add_argument("--" + name.replace("_", "-"), default=None, metavar="FILE" if name == "grammar" else
                           "TEXT", help=help)


def _constraint(args: argparse.Namespace) -> dict[str, str]:
    """The constraint keys the flags ask for: a schema given as a path is read from it, a grammar always is."""
    for name in CONSTRAINT_FLAGS:
        value = getattr(args, name, None)
        if value is None:
            continue
        if name == "grammar" or (name == "json_schema" and not value.lstrip().startswith("{")):
            try:
                value = Path(value).read_text()
            except OSError as exc:
                fail(f"--{name.replace('_', '-')}: cannot read {value!r}: {exc.strerror}")
        return {"constraint": "choice" if name == "choices" else name, "constraint_text": value}
    return {}


def _token_ids(text: str) -> list[int]:
    """Comma-separated token ids, as `--prefix-ids 3,17,42` gives them."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"prefix ids must be whole numbers separated by commas, got {text!r}") from None


def spec_from_args(args: argparse.Namespace, **overrides: object) -> RunSpec:
    given = {name: getattr(args, name) for name in spec_keys() if getattr(args, name, None) is not None}
    return RunSpec.from_dict({**given, **_constraint(args), **overrides})


def command_run(args: argparse.Namespace) -> None:
    # imported here: `models` and `--help` answer without loading torch
    from playground import runner
    from playground.events import DoneEvent, ProgressEvent, TextEvent
    from playground.result import Result

    spec = spec_from_args(args)
    prompt = args.prompt if args.prompt_file is None else read_text_file(
        args.prompt_file, "--prompt-file", limits.max_prompt_chars(),
        "the prompt's characters, which grow with PLAYGROUND_MAX_PROMPT_TOKENS")
    result: Result | None = None
    for event in runner.run(prompt, spec):
        if isinstance(event, ProgressEvent):
            print(f"[{event.fraction:4.0%}] {event.message}", file=sys.stderr)
        elif isinstance(event, TextEvent) and not args.json:
            print(event.delta, end="", flush=True)
        elif isinstance(event, DoneEvent):
            result = event.result
    assert result is not None
    if args.json:
        print(json.dumps(result))
        return
    print()
    m = result["metrics"]
    for i, text in enumerate(result["sequences"][1:], start=2):
        print(f"--- sequence {i}: {text}")
    constraint = result.get("constraint")
    if constraint:
        print(f"[constraint ({constraint['kind']}): {constraint['verdict']}, checked by {constraint['checked_by']}]",
              file=sys.stderr)
    print(f"[{result['new_tokens']} tokens, TTFT {m['ttft_s']} s, {m['tokens_per_s']} tok/s, "
          f"compile {m['compile_s']} s, KV cache {m['kv_cache_bytes']} B]", file=sys.stderr)
    busy = busy_note(result["extra"].get("machine_load"))
    if busy:
        print(f"warning: {busy}", file=sys.stderr)


def command_chain(args: argparse.Namespace) -> None:
    given = {name: getattr(args, name) for name in sampler_lab.lab_knobs() if getattr(args, name, None) is not None}
    distribution = {"probs": sampler_lab.parse_numbers("--probs", args.probs)} if args.probs is not None else \
        {"logits": sampler_lab.parse_numbers("--logits", args.logits)}
    lab = sampler_lab.request(distribution, given, history=sampler_lab.parse_ids("--history", args.history),
                              backend=args.backend,
                              breakers=sampler_lab.parse_ids("--dry-breaker-ids", args.dry_breaker_ids))
    result = sampler_lab.run(lab)
    if args.json:
        print(json.dumps({"stages": result["stages"], "final": result["final"]}))
        return
    print(sampler_lab.format_table(result))


def command_sweep(args: argparse.Namespace) -> None:
    from playground.sweep import prompt_sets
    from playground.sweep.knobs import parse_values
    from playground.sweep.run import Sweep, format_table, run_sweep, to_csv

    if args.list_prompt_sets:
        for name, found in SETS.items():
            print(f"{name:<10} {len(found.prompts)} prompts: {found.about}")
        return
    if not args.knob or args.values is None:
        fail("sweep needs --knob and --values (or --list-prompt-sets)")
    if args.prompt_set and args.prompts_file:
        fail("give --prompt-set or --prompts-file, not both")
    if args.prompts_file:
        try:
            prompts = prompt_sets.pasted_prompts(Path(args.prompts_file).read_text(encoding="utf-8"))
        except OSError as exc:
            fail(f"cannot read --prompts-file {args.prompts_file}: {exc.strerror or exc}")
    else:
        prompts = prompt_sets.prompt_set(args.prompt_set or "stories")
    values = parse_values(args.knob, args.values)
    # the base spec holds the first value, so a knob the strategy needs (prompt_lookup) is never its refused default
    sweep = Sweep(args.knob, values, spec_from_args(args, **{args.knob: values[0]}), prompts, args.seeds)
    stop = threading.Event()

    def interrupted(signum: int, frame: object) -> None:
        print("stopping: the run under way ends at its next token; the rows that finished are kept", file=sys.stderr)
        stop.set()

    def progress(done: int, total: int, what: str) -> None:
        print(f"[{done:>3}/{total}] {what}", file=sys.stderr)

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        result = run_sweep(sweep, stop.is_set, progress)
    finally:
        signal.signal(signal.SIGINT, previous)
    if args.csv:
        Path(args.csv).write_text(to_csv(result), encoding="utf-8")
    print(json.dumps(result) if args.json else format_table(result))


def command_bench(args: argparse.Namespace) -> None:
    from playground.tools import bench_command

    bench_command.command_bench(args)


def command_context(args: argparse.Namespace) -> None:
    from playground.context import measure as context
    from playground.context.request import spec_keys as context_keys

    request = context.request_from_args(args)
    spec = RunSpec.from_dict({name: getattr(args, name) for name in context_keys()
                              if getattr(args, name, None) is not None})

    def progress(message: str) -> None:
        print(message, file=sys.stderr)

    result = context.run_context(spec, request, args.text_file, progress)
    print(json.dumps(result) if args.json else context.format_table(result))


def command_models(args: argparse.Namespace) -> None:
    for row in catalog.list_models():
        state = "converted" if row["converted"] else ("installed" if row["installed"] else "not installed")
        print(f"{row['name']:<16} {row['kind']:<8} {state:<13} {row['description']}")
    if limits.is_public():
        print(f"public deployment: also {', '.join(catalog.allowed_hub_models())} (PLAYGROUND_ALLOWED_MODELS)")
        return
    print("any hub id org/name (needs hub access) or a local model directory under "
          f"{', '.join(map(str, paths.model_roots()))} (PLAYGROUND_MODEL_ROOTS)")


def command_serve(args: argparse.Namespace) -> None:
    from playground.ui import (
        serving,  # imported here: the other commands start without gradio
        warmup,
    )

    if args.port is not None and not 1 <= args.port <= 65535:
        fail(f"--port={args.port} is out of range; allowed: 1 to 65535")
    demo = serving.build_app()
    warmup.start()
    serving.launch(demo, server_name=args.host, server_port=args.port)


def command_soak(args: argparse.Namespace) -> None:
    from playground.tools import soak

    code = soak.command_soak(args)
    if code:
        raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> None:
    """The CLI (also the `playground` console script)."""
    host.apply_thread_limits()  # before torch or jax start their thread pools
    device.configure_process()  # before JAX starts its backends
    args = build_parser().parse_args(argv)
    handler = {"run": command_run, "chain": command_chain, "sweep": command_sweep, "bench": command_bench,
               "context": command_context, "models": command_models, "serve": command_serve,
               "soak": command_soak}[args.command]
    try:
        handler(args)
    except PlaygroundError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()

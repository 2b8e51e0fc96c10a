"""The benchmark's assisted-decoding part: prompt lookup on an input-grounded prompt, PyTorch against JAX.

Prompt lookup pays where the output repeats its input (editing, summarizing with quotes, code changes), so it
is measured on such a prompt: a passage of about 330 tokens (an original paragraph on lighthouse keeping,
written for this benchmark) that the model is asked to copy. Plain JAX greedy decoding runs on the same prompt
as the baseline (`jax-grounded`), and plain PyTorch greedy for PyTorch's lookup with 3 drafts
(`torch-grounded`, `torch-prompt-lookup-3`); each assisted configuration reports its acceptance rate and tokens per
forward pass, and whether its tokens equal plain greedy's over the same cache. JAX prompt lookup also runs over
the sliding and sink caches with a window smaller than the prompt, against the static cache: what spare ring
slots and per-query masks cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from playground.models.loaded import LoadedModel
from playground.runner import backend_for, encode_prompt
from playground.spec import RunSpec

GROUNDED_PROMPT = (
    "Copy the following passage exactly, word for word.\n\n"
    "Before electric lamps and radio beacons, a lighthouse was only as reliable as the family who kept it. "
    "The keeper rose before dusk to trim the wicks, polish the brass and wipe the salt from the great lens, "
    "because a single smear could dim the beam that ships relied on to find the harbour mouth. Through the "
    "night he climbed the spiral stairs every few hours to wind the clockwork that turned the lens, and to "
    "refill the reservoir of whale oil, later paraffin, that fed the flame. In fog he rang a bell by hand, "
    "sometimes for a whole night, counting the strokes so that passing crews could tell one station from the "
    "next. The logbook recorded the weather, the ships that passed, the oil burned and every repair, and the "
    "inspectors who arrived by boat twice a year read it line by line. Many keepers lived with their wives "
    "and children on rocks so small that a storm could cut them off for weeks; supplies came by tender when "
    "the sea allowed, and gardens were planted in soil carried over in sacks. When a keeper fell ill, his "
    "wife or eldest daughter often kept the light burning in his place, and several of them were later "
    "appointed keepers in their own right. Automation arrived slowly over the twentieth century, station by "
    "station, until the last resident keepers locked their doors, and the lights they had tended for "
    "generations went on turning without anyone on the rock to watch them."
)

PROMPT_LOOKUP = 10  # drafts per pass, as the page's preset uses
# drafts per pass of PyTorch's short lookup: a verify pass of 4 tokens, the case where a pass costs most against a
# plain step (its target is 1.5x plain PyTorch greedy)
SHORT_LOOKUP = 3
# the bounded caches' window: it holds the 325-token grounded prompt (a shorter one cuts the passage off and the
# drafts stop matching), and prompt + 128 new tokens outgrow it, so later verify passes write into a full ring
BOUNDED_WINDOW = 384
BOUNDED = {"sliding": {"cache": "sliding", "window": BOUNDED_WINDOW},
           "sink": {"cache": "sink", "window": BOUNDED_WINDOW, "sink_tokens": 4}}


def _assisted_row(name: str, outputs: list[Any], reference: list[int] | None) -> dict[str, Any]:
    """Acceptance, tokens per forward pass and token identity of the last timed run (all runs are the same
    greedy generation), added to a config's row."""
    last = outputs[-1]
    tokens = last.sequences[0]
    return {"acceptance_rate": round(last.acceptance_rate, 4) if last.acceptance_rate is not None else None,
            "tokens_per_forward": round(len(tokens) / last.forward_passes, 3) if last.forward_passes else None,
            "same_tokens_as_jax": tokens == reference if reference is not None else None}


def bench_grounded(loaded: LoadedModel, new_tokens: int, probe: Any, progress: Callable[[str], Any],
                   timed: Callable[..., dict[str, Any]]) -> list[dict[str, Any]]:
    """Plain JAX greedy, PyTorch prompt lookup and JAX prompt lookup on the grounded prompt, each warmed up once
    and then timed by `timed` as the other configurations are."""
    on_jax, on_torch = backend_for("jax").generate, backend_for("torch").generate
    ids = encode_prompt(loaded, GROUNDED_PROMPT, None)
    plain = RunSpec(model=loaded.name, backend="jax", cache="static", max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens)
    lookup = plain.replace(strategy="assisted", prompt_lookup=PROMPT_LOOKUP)
    runs: list[tuple[str, Callable[..., Any], RunSpec]] = [
        ("jax-grounded", on_jax, plain),
        ("torch-grounded", on_torch, plain.replace(backend="torch", cache="dynamic")),
        ("torch-prompt-lookup", on_torch, lookup.replace(backend="torch", cache="dynamic")),
        ("torch-prompt-lookup-3", on_torch,
         lookup.replace(backend="torch", cache="dynamic", prompt_lookup=SHORT_LOOKUP)),
        ("jax-prompt-lookup", on_jax, lookup),
        *((f"jax-prompt-lookup-{name}", on_jax, lookup.replace(**knobs)) for name, knobs in BOUNDED.items()),
    ]
    rows, reference = [], None
    for name, generate, spec in runs:
        progress(f"{name}: {len(ids)}-token grounded prompt, {new_tokens} tokens, warm-up + timed")
        outputs = [generate(loaded, ids, spec, lambda _: None, lambda: False)]
        own = reference  # what the tokens must equal: plain JAX greedy over the same cache
        if spec.cache not in ("static", "dynamic"):
            own = on_jax(loaded, ids, plain.replace(cache=spec.cache, window=spec.window, sink_tokens=spec.sink_tokens),
                         lambda _: None, lambda: False).sequences[0]

        def run_once(generate: Callable[..., Any] = generate, spec: RunSpec = spec,
                     outputs: list[Any] = outputs) -> tuple[float, list[float]]:
            outputs.append(generate(loaded, ids, spec, lambda _: None, lambda: False))
            return outputs[-1].start_time, outputs[-1].token_times

        row = timed(name, run_once, probe, compile_s=round(outputs[0].compile_s, 3))
        reference = outputs[-1].sequences[0] if reference is None else reference
        rows.append({**row, "prompt_tokens": len(ids),
                     **(_assisted_row(name, outputs, own) if spec.strategy == "assisted" else {})})
    return rows


def grounded_ratios(by_name: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """JAX prompt lookup against plain JAX greedy on the same grounded prompt, and against PyTorch's lookup."""
    def ratio(a: str, b: str) -> float | None:
        top, bottom = by_name[a]["tokens_per_s"], by_name[b]["tokens_per_s"]
        return round(top / bottom, 3) if top and bottom else None

    def pass_ratio(a: str, b: str) -> float | None:
        """Verify passes per second: what a cache's extra slots and masks cost, whatever its drafts' luck."""
        rates = [by_name[n]["tokens_per_s"] / by_name[n]["tokens_per_forward"] if by_name[n]["tokens_per_s"]
                 and by_name[n]["tokens_per_forward"] else None for n in (a, b)]
        return round(rates[0] / rates[1], 3) if rates[0] and rates[1] else None

    return {"jax_prompt_lookup_vs_jax": ratio("jax-prompt-lookup", "jax-grounded"),
            "torch_prompt_lookup_vs_torch": ratio("torch-prompt-lookup", "torch-grounded"),
            "torch_prompt_lookup_3_vs_torch": ratio("torch-prompt-lookup-3", "torch-grounded"),
            "jax_prompt_lookup_vs_torch_prompt_lookup": ratio("jax-prompt-lookup", "torch-prompt-lookup"),
            **{f"jax_prompt_lookup_{name}_vs_static": ratio(f"jax-prompt-lookup-{name}", "jax-prompt-lookup")
               for name in BOUNDED},
            **{f"jax_prompt_lookup_{name}_passes_vs_static": pass_ratio(f"jax-prompt-lookup-{name}",
                                                                         "jax-prompt-lookup") for name in BOUNDED}}


def assisted_lines(result: dict[str, Any]) -> list[str]:
    """The table's lines for the grounded-prompt configurations: acceptance, tokens per pass, identity."""
    lines = []
    for row in result["configs"]:
        if "tokens_per_forward" in row:
            lines.append(f"  {row['name']}: acceptance {row['acceptance_rate']}, {row['tokens_per_forward']} tokens "
                         f"per forward pass, tokens equal plain JAX greedy: {row['same_tokens_as_jax']}")
    ratio = result["ratios"].get("jax_prompt_lookup_vs_jax")
    if ratio is not None:
        lines.append(f"jax-prompt-lookup / jax-grounded (same {PROMPT_LOOKUP}-draft grounded prompt): {ratio:.2f}x")
    for name, drafts in (("torch_prompt_lookup_vs_torch", PROMPT_LOOKUP),
                         ("torch_prompt_lookup_3_vs_torch", SHORT_LOOKUP)):
        ratio = result["ratios"].get(name)
        if ratio is not None:
            lines.append(f"torch prompt lookup ({drafts} drafts) / torch-grounded (plain PyTorch greedy): {ratio:.2f}x")
    for name in BOUNDED:
        ratio = result["ratios"].get(f"jax_prompt_lookup_{name}_vs_static")
        passes = result["ratios"].get(f"jax_prompt_lookup_{name}_passes_vs_static")
        if ratio is not None and passes is not None:
            lines.append(f"jax-prompt-lookup-{name} / jax-prompt-lookup (window {BOUNDED_WINDOW} against a static "
                         f"cache): {ratio:.2f}x tokens/s, {passes:.2f}x verify passes/s")
    return lines

"""What the cache still holds: a strip over the prompt and the output of a sliding, sink or quantized column,
showing at a chosen step which positions the cache keeps, which are sinks, evicted or quantized. An assisted
column's slider moves over its verify passes instead: each pass's drafts are drawn where the cache holds them,
accepted or rejected, past the window of a bounded ring.

The states come from `playground.retention` (checked against the real caches by the tests), fed with the
column's applied spec, its Result's token counts and the model's attention layout; each strip row is a group
of layers that keep the same positions (Gemma3: its sliding layers and its global layers).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from itertools import groupby

import gradio as gr
from gradio.blocks import Block

from playground import registry
from playground.result import Result
from playground.retention import (
    CacheRow,
    State,
    VerifyPass,
    retains,
    retention,
    settings_for,
    verify_retention,
    written,
)
from playground.ui.events import Updates, on_private, writes
from playground.ui.outcome import Outcome
from playground.ui.strategy_view import result_view

STATE_TEXT: dict[str, str] = {"kept": "kept (full precision)", "sink": "sink", "evicted": "evicted",
                              "quantized": "quantized", "unwritten": "not written yet",
                              "accepted": "draft, accepted by this pass",
                              "rejected": "draft, rejected by this pass (rolled back, rewritten later)"}

CACHE_CSS = """
.cache-strip { font-size: 0.82em; color: var(--body-text-color); }
.cache-row { margin: 3px 0; }
.cache-label { color: var(--body-text-color-subdued); }
.cache-bar { display: flex; height: 14px; border: 1px solid var(--border-color-primary); border-radius: 3px;
             overflow: hidden; }
.cache-run { min-width: 1px; }
.cache-run.output-start { box-shadow: inset 2px 0 0 var(--body-text-color); }
.cache-kept { background: #22c55e; }
.cache-sink { background: #7c3aed; }
.cache-evicted { background: repeating-linear-gradient(45deg, #e5e7eb 0 3px, #9ca3af 3px 5px); }
.cache-quantized { background: #f59e0b; }
.cache-unwritten { background: transparent; }
.cache-accepted { background: #2563eb; }
.cache-rejected { background: #dc2626; }
.cache-key { display: inline-block; width: 10px; height: 10px; margin: 0 3px 0 8px; border-radius: 2px;
             vertical-align: middle; }
"""


def strip_applies(result: Result | None) -> bool:
    """A strip is drawn for columns whose cache keeps less than everything at full precision (either backend)."""
    if not result or result["new_tokens"] < 1 or "attention_layers" not in result:
        return False
    spec = result["spec"]
    return retains(str(spec.get("cache")))


def spare_slots(result: Result) -> int:
    """The slots a JAX assisted run's rings keep past their windows: its widest verify pass, less the token
    it feeds. PyTorch's caches have none: they grow by each pass and crop back."""
    widths = result.get("extra", {}).get("verify_widths") or [1]
    return max(widths) - 1 if result["spec"].get("backend") == "jax" else 0


def rows_at(result: Result, step: int, passes: list[VerifyPass]) -> list[CacheRow]:
    """The rows at step `step`, or during verify pass `step` of an assisted run (`passes` not empty)."""
    layout = result["attention_layers"]
    settings = settings_for(result["spec"], layout["layer_types"], layout["sliding_window"], spare_slots(result))
    if passes:
        return verify_retention(settings, result["prompt_tokens"], result["new_tokens"], passes[step - 1])
    return retention(settings, result["prompt_tokens"], result["new_tokens"], step)


def first_shown(passes: list[VerifyPass], last: int) -> int:
    """The step drawn first: an assisted run's last pass that rejected a draft (the rollback is what the strip
    is there to show), else the last step."""
    rejecting = [i + 1 for i, p in enumerate(passes) if p.accepted < p.drafted]
    return rejecting[-1] if rejecting else last


def _runs(states: Sequence[State], prompt_tokens: int) -> str:
    """One div per run of equal states (split where the output starts), as wide as the run."""
    divs = []
    index = 0
    keyed = [(state, i >= prompt_tokens) for i, state in enumerate(states)]
    for (state, is_output), group in groupby(keyed):
        length = len(list(group))
        where = "output" if is_output else "prompt"
        title = html.escape(f"{where} positions {index}-{index + length - 1}: {STATE_TEXT[state]}", quote=True)
        start = " output-start" if index == prompt_tokens else ""
        divs.append(f"<div class='cache-run cache-{state}{start}' style='flex:{length} 1 0' title=\"{title}\"></div>")
        index += length
    return "".join(divs)


def _summary(row: CacheRow) -> str:
    counts = {state: row.states.count(state) for state in STATE_TEXT}
    held = sum(counts[s] for s in ("kept", "sink", "quantized", "accepted", "rejected"))
    parts = [f"holds {held} of {held + counts['evicted']}"]
    parts += [f"{counts[s]} {s}" for s in ("sink", "quantized", "evicted", "accepted", "rejected") if counts[s]]
    return ", ".join(parts)


def _legend(rows: Sequence[CacheRow]) -> str:
    """Keys for the states this strip shows."""
    present = {state for row in rows for state in row.states}
    keys = "".join(f"<span class='cache-key cache-{s}'></span>{text}" for s, text in STATE_TEXT.items()
                   if s in present and s != "unwritten")
    return f"<div class='cache-label'>{keys} · the dark edge marks where the output starts</div>"


def cache_strip_html(result: Result | None, step: int) -> str:
    """The strip of every layer group at `step` (clamped to the run's steps, or its verify passes); empty where
    no strip applies."""
    if result is None or not strip_applies(result):
        return ""
    passes = result_view(result).verify_passes(result)
    last = len(passes) or result["new_tokens"]  # the slider moves over an assisted run's passes
    step = min(max(int(step), 1), last)
    prompt = result["prompt_tokens"]
    if passes:
        head = _pass_head(result, passes[step - 1], step, last)
    else:
        head = (f"<b>KV cache at step {step} of {last}</b>: {written(prompt, step)} positions written "
                f"({prompt} prompt + {step - 1} new)")
    rows = rows_at(result, step, passes)
    head += _residual_note(result, rows)
    drawn = "".join(f"<div class='cache-row'><div class='cache-label'>{html.escape(row.layers)}: {_summary(row)}"
                    f"</div><div class='cache-bar'>{_runs(row.states, prompt)}</div></div>" for row in rows)
    return f"<div class='cache-strip'><div>{head}</div>{drawn}{_legend(rows)}</div>"


def _residual_note(result: Result, rows: list[CacheRow]) -> str:
    """A cache that keeps its newest tokens in full precision: whether any position is quantized yet, so that a
    short run's "2-bit" and "4-bit" columns are not read as the bits' doing."""
    spec = result["spec"]
    if "residual_length" not in registry.cache_type(str(spec.get("cache"))).knobs:
        return ""
    written_now = max((sum(state != "unwritten" for state in row.states) for row in rows), default=0)
    if any("quantized" in row.states for row in rows):
        return ""
    return (f" · <b>nothing quantized yet</b>: all {written_now} positions still in full precision (the newest "
            f"{spec.get('residual_length')} stay so); lower the residual or generate more to see the bits act")


def _pass_head(result: Result, verify: VerifyPass, index: int, passes: int) -> str:
    """What verify pass `index` wrote, and where a bounded ring keeps its drafts."""
    fed = f"new token {verify.before}" if verify.before else f"the {result['prompt_tokens']}-token prompt"
    head = f"<b>KV cache during forward pass {index} of {passes}</b>: it wrote {fed}"
    if not verify.drafted:
        return head + " and no drafts"
    rejected = verify.drafted - verify.accepted
    head += f" and {verify.drafted} drafts: {verify.accepted} accepted, {rejected} rejected"
    spare = spare_slots(result)
    room = (f"each bounded ring has {spare} spare slots past its window for a pass's drafts" if spare else
            "the cache grows by the pass's tokens, and crop() then takes the rejected ones out")
    return f"{head} · {room}; a rejected draft's slot is masked until a later token overwrites it"


def strip_updates(step_slider: Block, strip: Block, result: Result | None) -> Updates:
    """A finished column's slider (set to the last step) and strip; both hidden where no strip applies."""
    if result is None or not strip_applies(result):
        return {step_slider: gr.update(visible=False), strip: gr.update(value="", visible=False)}
    passes = result_view(result).verify_passes(result)
    last = len(passes) or result["new_tokens"]
    first = first_shown(passes, last)
    label = "KV cache during forward pass" if passes else "KV cache at step"
    return {step_slider: gr.update(visible=True, minimum=1, maximum=max(last, 2), value=first,
                                   interactive=last > 1, label=label),
            strip: gr.update(value=cache_strip_html(result, first), visible=True)}


def wire_strip(column: int, step_slider: gr.Slider, strip: gr.HTML, results: gr.State) -> None:
    """Moving a column's slider redraws its strip from the results state (outside the queue: no model work)."""

    @writes(strip)
    def redraw(step: float, outcome: Outcome) -> str:  # its one output's value: the strip's HTML
        return cache_strip_html(outcome["results"][column], int(step))

    on_private(step_slider.input, redraw, [step_slider, results], trigger_mode="always_last")

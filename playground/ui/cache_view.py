"""What the cache still holds: a strip over the prompt and the output of a sliding, sink or quantized column,
showing at a chosen step which positions the cache keeps, which are sinks, evicted or quantized.

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

from playground.result import Result
from playground.retention import CacheRow, State, retains, retention, settings_for, written
from playground.ui.events import Updates, on_private, writes
from playground.ui.outcome import Outcome

STATE_TEXT: dict[str, str] = {"kept": "kept (full precision)", "sink": "sink", "evicted": "evicted",
                              "quantized": "quantized", "unwritten": "not written yet"}

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
.cache-key { display: inline-block; width: 10px; height: 10px; margin: 0 3px 0 8px; border-radius: 2px;
             vertical-align: middle; }
"""


def strip_applies(result: Result | None) -> bool:
    """A strip is drawn for columns whose cache keeps less than everything at full precision (either backend)."""
    if not result or result["new_tokens"] < 1 or "attention_layers" not in result:
        return False
    spec = result["spec"]
    return retains(str(spec.get("cache")))


def rows_at(result: Result, step: int) -> list[CacheRow]:
    layout = result["attention_layers"]
    settings = settings_for(result["spec"], layout["layer_types"], layout["sliding_window"])
    return retention(settings, result["prompt_tokens"], result["new_tokens"], step)


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
    held = counts["kept"] + counts["sink"] + counts["quantized"]
    parts = [f"holds {held} of {held + counts['evicted']}"]
    parts += [f"{counts[s]} {s}" for s in ("sink", "quantized", "evicted") if counts[s]]
    return ", ".join(parts)


def _legend(rows: Sequence[CacheRow]) -> str:
    """Keys for the states this strip shows."""
    present = {state for row in rows for state in row.states}
    keys = "".join(f"<span class='cache-key cache-{s}'></span>{text}" for s, text in STATE_TEXT.items()
                   if s in present and s != "unwritten")
    return f"<div class='cache-label'>{keys} · the dark edge marks where the output starts</div>"


def cache_strip_html(result: Result | None, step: int) -> str:
    """The strip of every layer group at `step` (clamped to the run's steps); empty where no strip applies."""
    if result is None or not strip_applies(result):
        return ""
    step = min(max(int(step), 1), result["new_tokens"])
    prompt = result["prompt_tokens"]
    head = (f"<b>KV cache at step {step} of {result['new_tokens']}</b>: {written(prompt, step)} positions written "
            f"({prompt} prompt + {step - 1} new)")
    rows = rows_at(result, step)
    drawn = "".join(f"<div class='cache-row'><div class='cache-label'>{html.escape(row.layers)}: {_summary(row)}"
                    f"</div><div class='cache-bar'>{_runs(row.states, prompt)}</div></div>" for row in rows)
    return f"<div class='cache-strip'><div>{head}</div>{drawn}{_legend(rows)}</div>"


def strip_updates(step_slider: Block, strip: Block, result: Result | None) -> Updates:
    """A finished column's slider (set to the last step) and strip; both hidden where no strip applies."""
    if result is None or not strip_applies(result):
        return {step_slider: gr.update(visible=False), strip: gr.update(value="", visible=False)}
    last = result["new_tokens"]
    return {step_slider: gr.update(visible=True, minimum=1, maximum=max(last, 2), value=last, interactive=last > 1),
            strip: gr.update(value=cache_strip_html(result, last), visible=True)}


def wire_strip(column: int, step_slider: gr.Slider, strip: gr.HTML, results: gr.State) -> None:
    """Moving a column's slider redraws its strip from the results state (outside the queue: no model work)."""

    @writes(strip)
    def redraw(step: float, outcome: Outcome) -> str:  # its one output's value: the strip's HTML
        return cache_strip_html(outcome["results"][column], int(step))

    on_private(step_slider.input, redraw, [step_slider, results], trigger_mode="always_last")

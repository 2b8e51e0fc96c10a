"""The page's Sampler lab tab: a distribution typed by hand (or one of a few shapes), the logits chain's knobs, and
what each stage kept, removed and moved, as `python -m playground chain` prints it.

The tab talks to the chain through playground/sampler_lab.py, which imports no backend until a request runs, so
the page starts without torch or jax. A knob counts as named when it leaves the lab's default (every stage off,
temperature 1), as the command's flags do.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground import registry, sampler_lab
from playground.errors import PlaygroundError
from playground.ui.events import Handler, on_private
from playground.ui.knob_widgets import knob_widget

PROBABILITIES, LOGITS = "probabilities", "logits"
# a few shapes to start from, each a point the samplers treat differently
SHAPES = {
    "long tail (Zipf, 16 tokens)": ", ".join(f"{1 / (rank + 1):.4f}" for rank in range(16)),
    "two peaks": "0.30, 0.28, 0.10, 0.08, 0.07, 0.06, 0.05, 0.03, 0.02, 0.01",
    "one sure token": "0.90, 0.04, 0.03, 0.02, 0.01",
    "flat (10 tokens)": ", ".join(["0.1"] * 10),
}
FIRST_SHAPE = next(iter(SHAPES))
TYPED = "typed by hand"  # the shape once the box is edited: the dropdown no longer names a shape it left
EMPTY_NOTE = "Set a knob and press <b>Apply the chain</b> to see what each stage keeps and removes."
SHOWN = 24  # bars drawn per stage, then one bar for the rest of the kept ids
JSON_SHOWN = 200  # ids per list in the page's JSON view: a whole vocabulary's lists made a JSON tree too big to draw


def lab_default(name: str) -> Any:
    """A knob's value in the lab when it is not named: every stage off (top-k 0), the registry's default else."""
    return 0 if name == "top_k" else registry.knob(name).default


@dataclass
class LabTab:
    """The tab's components; `inputs()` is what a request reads."""

    shape: gr.Dropdown
    distribution: gr.Textbox
    kind: gr.Radio
    history: gr.Textbox
    breakers: gr.Textbox
    backend: gr.Radio
    knobs: dict[str, Any]
    run: gr.Button
    stages: gr.HTML
    result: gr.JSON

    def inputs(self) -> list[Any]:
        return [self.distribution, self.kind, self.history, self.breakers, self.backend, *self.knobs.values()]


def build_lab_tab() -> LabTab:
    gr.Markdown("Give a distribution, set the knobs of the stages you want, and see what each stage of the logits "
                "chain keeps (bars), removes and moves, on either backend. Stages whose knobs stay at their "
                "default are off; the temperature is 1 unless you set it. Mirostat and adaptive-p start from "
                "their first step's state (μ = 2τ; the average at the target).")
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=300):
            shape = gr.Dropdown([*SHAPES, TYPED], value=FIRST_SHAPE, label="start from a shape", elem_id="lab-shape")
            distribution = gr.Textbox(SHAPES[FIRST_SHAPE], lines=3, label="distribution (id 0 first)",
                                      info="numbers separated by commas: probabilities (normalised for you; 0 = "
                                           "already removed) or logits (-inf = already removed)",
                                      elem_id="lab-distribution")
            kind = gr.Radio([PROBABILITIES, LOGITS], value=PROBABILITIES, label="the numbers are",
                            elem_id="lab-kind")
            history = gr.Textbox("", max_lines=1, label="history: token ids generated so far",
                                 info="the penalties, no-repeat n-grams and DRY read it, e.g. 3, 5, 3",
                                 elem_id="lab-history")
            breakers = gr.Textbox("", max_lines=1, label="DRY sequence breakers (token ids)",
                                  info="no tokenizer here, so DRY's breakers are ids; none by default",
                                  elem_id="lab-breakers")
            backend = gr.Radio(list(sampler_lab.lab_backends()), value="torch", label="backend", elem_id="lab-backend")
            run = gr.Button("Apply the chain", variant="primary", elem_id="lab-run")
            stages = gr.HTML(f'<div class="lab-empty">{EMPTY_NOTE}</div>', elem_id="lab-stages")
        with gr.Column(scale=3, min_width=300):
            knobs: dict[str, Any] = {}
            names = sampler_lab.lab_knobs()
            for start in range(0, len(names), 2):
                with gr.Row():
                    for name in names[start:start + 2]:
                        knobs[name] = knob_widget(sampler_lab.lab_knob(name), 0, lab_default(name),
                                                  elem_id=f"lab-{name}")
    result = gr.JSON(None, label=f"the result as `python -m playground chain --json` prints it, each list cut to its "
                     f"first {JSON_SHOWN} (its length beside it)", elem_id="lab-json")
    return LabTab(shape, distribution, kind, history, breakers, backend, knobs, run, stages, result)


def lab_request(distribution: str, kind: str, history: str, breakers: str, backend: str,
                knobs: Mapping[str, Any]) -> sampler_lab.LabRequest:
    """The tab's fields as a checked request: the knobs that leave the lab's default are the named ones."""
    field = "probabilities" if kind == PROBABILITIES else "logits"
    numbers = sampler_lab.parse_numbers(field, distribution)
    named = {name: _typed(name, value) for name, value in knobs.items() if _typed(name, value) != lab_default(name)}
    return sampler_lab.request({"probs" if kind == PROBABILITIES else "logits": numbers}, named,
                               history=sampler_lab.parse_ids("history", history), backend=backend,
                               breakers=sampler_lab.parse_ids("DRY sequence breakers", breakers))


def _typed(name: str, value: Any) -> Any:
    """A widget's value as its knob's type (a slider gives floats; a number box may give None)."""
    knob = registry.knob(name)
    if value is None:
        return lab_default(name)
    if knob.kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def stages_html(result: sampler_lab.LabResult) -> str:
    """Each stage as a row: its label, what it kept (a bar per id, most likely first, the rest as one bar),
    removed and moved; then the final distribution."""
    final = result["final"]
    final_row = _row("final distribution", [e["id"] for e in final[:SHOWN]], [e["p"] for e in final], [], None,
                     len(final))
    if not result["stages"]:
        return ('<div class="lab-empty">No stage is on: every knob is at its default. The final distribution is the '
                'one you gave.</div>' + final_row)
    rows = [_row(stage["label"], stage["kept"], stage["p"], stage["removed"], stage["moved"])
            for stage in result["stages"]]
    return f'<div class="lab">{"".join(rows)}{final_row}</div>'


@dataclass(frozen=True)
class Bars:
    """What a stage's row draws: its SHOWN most likely kept ids, then the rest summed as one bar, so that a
    262,144-token vocabulary draws 25 bars rather than a quarter of a million elements (which crashed the tab)."""

    shown: list[tuple[int, float]]
    rest_count: int
    rest_p: float


def bars(ids: list[int], ps: list[float], count: int | None = None) -> Bars:
    """`ids` most likely first with their `ps`; `count` the kept ids in all when `ids` holds only the first."""
    total = len(ps) if count is None else count
    return Bars(list(zip(ids[:SHOWN], ps[:SHOWN], strict=False)), max(0, total - SHOWN), math.fsum(ps[SHOWN:]))


def _row(label: str, ids: list[int], ps: list[float], removed: list[int], moved: float | None,
         count: int | None = None) -> str:
    drawn = bars(ids, ps, count)
    top = max([p for _, p in drawn.shown] + [drawn.rest_p]) or 1.0
    cells = [f'<div class="lab-bar" title="id {token}: p {p:.4f}"><span style="height:{100 * p / top:.1f}%">'
             f'</span><small>{token}</small></div>' for token, p in drawn.shown]
    if drawn.rest_count:
        cells.append(f'<div class="lab-bar lab-rest" title="{drawn.rest_count:,} more kept tokens: p '
                     f'{drawn.rest_p:.4f} together"><span style="height:{100 * drawn.rest_p / top:.1f}%"></span>'
                     f'<small>+{drawn.rest_count:,}</small></div>')
    shown_removed = ", ".join(map(str, removed[:SHOWN])) + (" …" if len(removed) > SHOWN else "")
    facts = [f"kept {len(ps):,}"]
    if drawn.rest_count:
        facts.append(f"the last bar: the other {drawn.rest_count:,}, p {drawn.rest_p:.4f} together")
    if moved is not None:
        gone = f'<span class="cut-removed">removed {len(removed):,}</span> ({html.escape(shown_removed)})' \
            if removed else "removed 0"
        facts += [gone, f"moved {moved:.4f}"]
    return (f'<div class="lab-stage"><div class="lab-label"><b>{html.escape(label)}</b>'
            f'<span class="lab-facts">{" · ".join(facts)}</span></div><div class="lab-bars">{"".join(cells)}</div>'
            '</div>')


def page_json(result: sampler_lab.LabResult) -> dict[str, Any]:
    """The result for the page's JSON view: each list cut to its first JSON_SHOWN entries, its length beside
    it (`kept_count`, `removed_count`, `final_count`); the API and the command give every id."""
    stages = [{**stage, "kept": stage["kept"][:JSON_SHOWN], "p": stage["p"][:JSON_SHOWN],
               "kept_count": len(stage["kept"]), "removed": stage["removed"][:JSON_SHOWN],
               "removed_count": len(stage["removed"])} for stage in result["stages"]]
    return {"stages": stages, "final": result["final"][:JSON_SHOWN], "final_count": len(result["final"])}


def apply_chain(distribution: str, kind: str, history: str, breakers: str, backend: str,
                *values: Any) -> tuple[str, dict[str, Any]]:
    """The tab's Apply: the stages' view and the JSON; a refused request raises gr.Error with its one line."""
    knobs = dict(zip(sampler_lab.lab_knobs(), values, strict=True))
    try:
        result = sampler_lab.run(lab_request(distribution, kind, history, breakers, backend, knobs))
    except PlaygroundError as exc:
        raise gr.Error(str(exc)) from None
    return stages_html(result), page_json(result)


def api_chain(request: str) -> sampler_lab.LabResult:
    """The lab over the API (`api_name="chain"`): a JSON object with `probs` or `logits`, and optionally
    `history`, `dry_breaker_ids`, `backend` and any lab knob by name."""
    try:
        data = json.loads(request)
    except json.JSONDecodeError as exc:
        raise gr.Error(f"request must be a JSON object: {exc.msg}") from None
    if not isinstance(data, dict):
        raise gr.Error("request must be a JSON object with probs or logits")
    given = {key: data.pop(key) for key in ("probs", "logits") if key in data}
    try:
        lab = sampler_lab.request(given, {k: v for k, v in data.items()
                                          if k not in ("history", "dry_breaker_ids", "backend")},
                                  history=data.get("history", ()), backend=data.get("backend", "torch"),
                                  breakers=data.get("dry_breaker_ids", ()))
        return sampler_lab.run(lab)
    except PlaygroundError as exc:
        raise gr.Error(str(exc)) from None


def pick_shape(shape: str) -> tuple[Any, Any]:
    """A shape's probabilities into the distribution box; "typed by hand" leaves the box as it is."""
    if shape not in SHAPES:
        return gr.update(), gr.update()
    return SHAPES[shape], PROBABILITIES


def wire(tab: LabTab) -> None:
    """A shape fills the box outside the queue, and a box that no longer holds its shape's numbers (typed or
    pasted) turns the shape to "typed by hand", in the browser alone (a pasted vocabulary is megabytes: no edit
    sends it to the server); Apply runs in the queue, so a JAX compile never runs beside a generation and
    falsifies its timing."""
    on_private(tab.shape.input, Handler(pick_shape, (tab.distribution, tab.kind)), [tab.shape])
    typed_js = f"(text, shape) => ({json.dumps(SHAPES)}[shape] === text ? shape : {json.dumps(TYPED)})"
    tab.distribution.change(None, [tab.distribution, tab.shape], [tab.shape], queue=False, api_visibility="private",
                            show_progress="hidden", js=typed_js)
    apply = Handler(apply_chain, (tab.stages, tab.result))
    on_private(tab.run.click, apply, tab.inputs(), queue=True)
    on_private(tab.distribution.submit, apply, tab.inputs(), queue=True)

"""Gradio Blocks: one prompt, side-by-side run columns, streamed outputs and a metrics table; plus the `run` API."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground import catalog, compatibility, runner
from playground.errors import PlaygroundError
from playground.events import DoneEvent, ProgressEvent, TextEvent
from playground.spec import BACKENDS, CACHES, DEFAULT_MODEL, STRATEGIES, WEIGHTS, RunSpec, max_new_tokens_cap

MAX_COLUMNS = 4
START_COLUMNS = 2
_STOP_FLAGS: dict[str, threading.Event] = {}  # session hash -> stop requested; set by `stop` outside the queue

# (label in the table, key in Result metrics, unit, whether lower is better)
METRIC_ROWS = [
    ("TTFT", "ttft_s", "s", True),
    ("decode speed", "tokens_per_s", "tok/s", False),
    ("ms/token p50", "ms_per_token_p50", "ms", True),
    ("ms/token p90", "ms_per_token_p90", "ms", True),
    ("compile", "compile_s", "s", True),
    ("load", "load_s", "s", True),
    ("new tokens", None, "tokens", None),
    ("KV cache", "kv_cache_bytes", "MiB", True),
    ("peak RSS", "peak_rss_bytes", "MiB", True),
    ("acceptance", "acceptance_rate", "", False),
]


@dataclass
class ColumnControls:
    """The components of one run column."""

    box: gr.Column
    model: gr.Dropdown
    backend: gr.Radio
    strategy: gr.Dropdown
    cache: gr.Dropdown
    weights: gr.Dropdown
    max_new_tokens: gr.Slider
    temperature: gr.Slider
    top_k: gr.Slider
    top_p: gr.Slider
    sampling_box: gr.Group
    remove: gr.Button
    notice: gr.Markdown
    output: gr.Textbox

    def settings(self) -> list[gr.components.Component]:
        return [self.model, self.backend, self.strategy, self.cache, self.weights, self.max_new_tokens,
                self.temperature, self.top_k, self.top_p]


def offered(options: tuple[str, ...], axis: int) -> list[str]:
    """Choices that run in at least one combination; the others are not shown at all."""
    combos = [(b, s, c) for b in BACKENDS for s in STRATEGIES for c in CACHES]
    return [o for o in options if any(combo[axis] == o and compatibility.refusal(*combo) is None for combo in combos)]


def column_spec(values: dict[str, Any], seed: int, chat: bool | None) -> RunSpec:
    return RunSpec.from_dict({**values, "seed": seed, "chat": chat})


def combination_notice(backend: str, strategy: str, cache: str) -> str:
    reason = compatibility.refusal(backend, strategy, cache)
    return f"⚠️ cannot run: {reason}" if reason else ""


def build_column(index: int) -> ColumnControls:
    model_names = list(catalog.BUNDLED)
    with gr.Column(visible=index < START_COLUMNS, min_width=260) as box:
        with gr.Row():
            gr.Markdown(f"### Column {index + 1}")
            remove = gr.Button("✕ remove", size="sm", scale=0, elem_id=f"remove-{index}")
        model = gr.Dropdown(model_names, value=DEFAULT_MODEL, label="model", allow_custom_value=True,
                            info="bundled, hub id org/name, or local dir")
        backend = gr.Radio(list(BACKENDS), value="torch", label="backend")
        strategy = gr.Dropdown(offered(STRATEGIES, 1), value="greedy", label="strategy")
        cache = gr.Dropdown(offered(CACHES, 2), value="dynamic", label="KV cache")
        weights = gr.Dropdown(list(WEIGHTS), value="fp32", label="weights")
        max_new_tokens = gr.Slider(1, max_new_tokens_cap(), value=64, step=1, label="max new tokens")
        with gr.Group(visible=False) as sampling_box:
            temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="temperature")
            top_k = gr.Slider(0, 200, value=50, step=1, label="top-k (0 = off)")
            top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p (1 = off)")
        notice = gr.Markdown("")
        output = gr.Textbox(label="output", lines=10, elem_id=f"output-{index}", interactive=False)
    controls = ColumnControls(box, model, backend, strategy, cache, weights, max_new_tokens, temperature, top_k,
                              top_p, sampling_box, remove, notice, output)
    strategy.change(lambda s: gr.update(visible=s == "sampling"), strategy, sampling_box, queue=False)
    for component in (backend, strategy, cache):
        component.change(combination_notice, [backend, strategy, cache], notice, queue=False)
    return controls


def metrics_table(results: list[dict[str, Any] | None], labels: list[str]) -> dict[str, Any]:
    """Rows are metrics, columns are runs; the best value per row is marked with ★."""
    rows = []
    for label, key, unit, lower_better in METRIC_ROWS:
        values = []
        for result in results:
            if result is None:
                values.append(None)
            elif key is None:
                values.append(result["new_tokens"])
            else:
                value = result["metrics"].get(key)
                values.append(value / 2**20 if value is not None and unit == "MiB" else value)
        present = [v for v in values if v is not None]
        best = (min(present) if lower_better else max(present)) if present and lower_better is not None else None
        cells = []
        for v in values:
            text = "–" if v is None else (f"{v:.3g}" if isinstance(v, float) else str(v))
            cells.append(f"★ {text}" if best is not None and v == best and len(present) > 1 else text)
        rows.append([f"{label} ({unit})" if unit else label] + cells)
    return {"headers": ["metric"] + labels, "data": rows}


def build_ui() -> gr.Blocks:
    with gr.Blocks(title="Decoding Playground") as demo:
        gr.Markdown("# Decoding Playground\nOne prompt, several decoding settings side by side: "
                    "text, speed and KV-cache size. Columns run one after another on this 2-core machine, "
                    "so each column's timing is its own.")
        prompt = gr.Textbox(label="prompt", lines=3, elem_id="prompt", value="What is the capital of France?")
        with gr.Row():
            seed = gr.Number(0, label="seed (all columns)", precision=0, minimum=0, scale=1)
            chat = gr.Radio(["auto", "chat", "raw"], value="auto", label="prompt format", scale=2,
                            info="auto: chat template for instruct models")
            run = gr.Button("Run all columns", variant="primary", elem_id="run", scale=1)
            stop = gr.Button("Stop", variant="stop", elem_id="stop", scale=1)
            add = gr.Button("+ add column", elem_id="add-column", scale=1)
        visible = gr.State([i < START_COLUMNS for i in range(MAX_COLUMNS)])
        status = gr.Markdown("")
        with gr.Row():
            columns = [build_column(i) for i in range(MAX_COLUMNS)]
        metrics = gr.Dataframe(label="metrics (★ best)", elem_id="metrics", interactive=False,
                               value=metrics_table([], []))
        with gr.Accordion("Which strategy works with which cache", open=False):
            gr.Dataframe(value=[list(r.values()) for r in compatibility.table()],
                         headers=list(compatibility.table()[0]), interactive=False)

        def show(flags: list[bool]) -> dict[Any, Any]:
            updates: dict[Any, Any] = {visible: flags}
            for flag, col in zip(flags, columns, strict=True):
                updates[col.box] = gr.update(visible=flag)
                updates[col.remove] = gr.update(visible=sum(flags) > 1)
            updates[add] = gr.update(interactive=not all(flags))
            return updates

        def add_column(flags: list[bool]) -> dict[Any, Any]:
            flags = list(flags)
            if False in flags:
                flags[flags.index(False)] = True
            return show(flags)

        layout_outputs = [visible, add] + [c.box for c in columns] + [c.remove for c in columns]
        add.click(add_column, visible, layout_outputs, queue=False)
        for i, col in enumerate(columns):
            col.remove.click(lambda flags, i=i: show([f and j != i for j, f in enumerate(flags)]),
                             visible, layout_outputs, queue=False)

        def run_all(data: dict[Any, Any], request: gr.Request,
                    progress: gr.Progress = gr.Progress()) -> Iterator[dict[Any, Any]]:  # noqa: B008 - Gradio idiom
            stop_flag = _STOP_FLAGS.setdefault(request.session_hash or "", threading.Event())
            stop_flag.clear()
            flags = data[visible]
            active = [i for i, flag in enumerate(flags) if flag]
            labels = [f"column {i + 1}" for i in active]
            results: list[dict[str, Any] | None] = [None] * len(active)
            chat_mode = {"auto": None, "chat": True, "raw": False}[data[chat]]
            yield {col.output: "" for col in columns} | {col.notice: "" for col in columns}
            for slot, i in enumerate(active):
                col = columns[i]
                if stop_flag.is_set():
                    break
                yield {status: f"Running column {i + 1} of {len(active)} visible; the others wait their turn."}
                try:
                    names = ["model", "backend", "strategy", "cache", "weights", "max_new_tokens",
                             "temperature", "top_k", "top_p"]
                    spec = column_spec({n: data[c] for n, c in zip(names, col.settings(), strict=True)},
                                       int(data[seed] or 0), chat_mode)
                    for event in runner.run(data[prompt], spec, should_stop=stop_flag.is_set):
                        if isinstance(event, ProgressEvent):
                            progress(event.fraction, desc=f"column {i + 1}: {event.message}")
                        elif isinstance(event, TextEvent):
                            yield {col.output: event.text}
                        elif isinstance(event, DoneEvent):
                            results[slot] = event.result
                            note = " (stopped)" if event.result["stopped"] else ""
                            yield {col.output: event.result["text"], col.notice: f"done{note}",
                                   metrics: metrics_table(results, labels)}
                except PlaygroundError as exc:
                    # one column's refusal must not cost the others their run
                    yield {col.notice: f"⚠️ {exc}"}
            yield {status: "Stopped." if stop_flag.is_set() else "Done."}

        all_inputs = {prompt, seed, chat, visible}
        for col in columns:
            all_inputs.update(col.settings())
        all_outputs = [status, metrics] + [c.output for c in columns] + [c.notice for c in columns]
        run.click(run_all, all_inputs, all_outputs, api_visibility="private")
        prompt.submit(run_all, all_inputs, all_outputs, api_visibility="private")

        def request_stop(request: gr.Request) -> None:
            _STOP_FLAGS.setdefault(request.session_hash or "", threading.Event()).set()

        # outside the queue, so it is not stuck behind the run it is meant to stop
        stop.click(request_stop, None, None, queue=False, api_visibility="private")

        def api_run(prompt: str, spec: str) -> dict:
            """Run one generation; `spec` is a JSON object of RunSpec keys (missing keys take defaults)."""
            try:
                return runner.run_to_result(prompt, RunSpec.from_json(spec))
            except PlaygroundError as exc:
                raise gr.Error(str(exc)) from None

        gr.api(api_run, api_name="run")
    return demo


"""What the Sweep and Long context tabs share: the row of preset buttons, and Run and Stop (Run in the queue, as a
page run is, one generation at a time; Stop outside it, setting the session's stop flag that the run polls)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import gradio as gr
from gradio.blocks import Block

from playground.ui.events import Inputs, Updates, on_private, writes
from playground.ui.run import stop_flag


def preset_buttons(prefix: str, names: Iterable[str]) -> tuple[dict[str, gr.Button], gr.Markdown]:
    """A row of buttons, one per preset (`<prefix>-preset-<i>`), and the note a click fills (`<prefix>-preset-note`)."""
    with gr.Row(elem_id=f"{prefix}-presets"):
        buttons = {name: gr.Button(name, size="sm", elem_id=f"{prefix}-preset-{i}") for i, name in enumerate(names)}
    return buttons, gr.Markdown("", elem_id=f"{prefix}-preset-note")


TabRun = Callable[[Inputs, gr.Request, gr.Progress], Iterator[Updates]]


def wire_run_and_stop(name: str, run: gr.Button, stop: gr.Button, status: Block, inputs: Iterable[Block],
                      outputs: Iterable[Block], run_tab: TabRun, stopping: str) -> None:
    """`run_tab` on Run's click, streaming its updates to `outputs`; Stop sets the flag and says `stopping`. The
    handlers are named `run_<name>_on_page` and `stop_<name>`: Gradio names endpoints after functions, private
    ones too, and a plain `run` would push the public `/run` to `/run_1`."""

    def run_on_page(data: Inputs, request: gr.Request,
                    progress: gr.Progress = gr.Progress()) -> Iterator[Updates]:  # noqa: B008 - Gradio idiom
        yield from run_tab(data, request, progress)

    def stop_run(request: gr.Request) -> Updates:
        stop_flag(request).set()
        return {status: stopping}

    run_on_page.__name__ = run_on_page.__qualname__ = f"run_{name}_on_page"
    stop_run.__name__ = stop_run.__qualname__ = f"stop_{name}"
    on_private(run.click, writes(*outputs)(run_on_page), set(inputs), queue=True, show_progress_on=[status])
    on_private(stop.click, writes(status)(stop_run))

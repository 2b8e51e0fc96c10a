"""Gradio entry point (also the Space's app_file): build the playground page and serve it."""

import os

from playground import device, host

host.apply_thread_limits()  # before torch or jax start their thread pools: sized to the container's CPUs
device.configure_process()  # before JAX starts its backends

from playground.ui import warmup  # noqa: E402 - after the thread limits, by design
from playground.ui.style import CSS, THEME  # noqa: E402
from playground.ui.wiring import build_ui  # noqa: E402

demo, _ = build_ui()  # builds components only: models load lazily on the first run, so startup takes seconds
# one generation at a time: on 2 vCPUs parallel runs only slow each other and falsify timings; layout events
# run outside the queue (queue=False), so nobody's clicks wait behind a generation. Queued here, not under
# __main__, so a host that imports this module and launches `demo` itself gets the same queue.
demo.queue(default_concurrency_limit=1, max_size=int(os.environ.get("PLAYGROUND_QUEUE_SIZE", "32")))
warmup.start()  # PLAYGROUND_WARMUP=1 (default on a Space): compile the default columns and the presets on JAX

if __name__ == "__main__":
    demo.launch(css=CSS, theme=THEME)

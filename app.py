"""Gradio entry point (also the Space's app_file): build the playground page and serve it."""

import os

from playground.ui.style import CSS, THEME
from playground.ui.wiring import build_ui

demo = build_ui()  # builds components only: models load lazily on the first run, so startup takes seconds

if __name__ == "__main__":
    # one generation at a time: on 2 vCPUs parallel runs only slow each other and falsify timings;
    # layout events run outside the queue (queue=False), so nobody's clicks wait behind a generation
    demo.queue(default_concurrency_limit=1, max_size=int(os.environ.get("PLAYGROUND_QUEUE_SIZE", "32")))
    demo.launch(css=CSS, theme=THEME)

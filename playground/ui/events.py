"""How handlers meet Gradio: their update dicts, the outputs each declares once, and the private-event helper."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gradio.blocks import Block
from gradio.events import Dependency

Updates = dict[Block, Any]  # what a handler returns: component -> its new value or gr.update(...)
Inputs = dict[Block, Any]  # what a handler whose inputs are a set is handed: component -> its value


@dataclass(frozen=True)
class Handler:
    """A handler and every component its update dicts may key, declared together: Gradio's `outputs` list is
    derived from this, so it is never written a second time at the event (nor forgotten there)."""

    fn: Callable[..., Any]
    outputs: tuple[Block, ...]


def writes(*outputs: Block | Iterable[Block]) -> Callable[[Callable[..., Any]], Handler]:
    """Decorator: `fn` returns update dicts keyed by (some of) these components, given singly or as lists."""
    flat: list[Block] = []
    for item in outputs:
        flat += [item] if isinstance(item, Block) else list(item)

    def declare(fn: Callable[..., Any]) -> Handler:
        return Handler(fn, tuple(dict.fromkeys(flat)))

    return declare


def on_private(trigger: Callable[..., Dependency], handler: Handler, inputs: Any = None, **kw: Any) -> Dependency:
    """Wire `handler` to `trigger` (an event listener such as `button.click`, a dependency's `.then`, or
    `functools.partial(gr.on, triggers)`) as a private event: off the API page and, unless `queue=True` is
    given, outside the queue, so layout and settings changes never wait behind a generation. An event outside the
    queue answers at once, so it shows no loading spinner (Gradio's default covers every output, and a knob's
    change would flash one over the whole column card); a queued one shows its progress where it says
    (`show_progress_on`). Returns the dependency, for `.then()`."""
    options: dict[str, Any] = {"queue": False, "api_visibility": "private", **kw}
    if not options["queue"] and "show_progress" not in options and "show_progress_on" not in options:
        options["show_progress"] = "hidden"
    return trigger(handler.fn, inputs, list(handler.outputs), **options)

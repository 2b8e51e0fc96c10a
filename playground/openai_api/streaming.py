"""Server-sent events: each choice's text as it is generated, its last chunk (finish reason, logprobs, metrics),
usage when asked, then `data: [DONE]`. A client that goes away stops the generation at its next token."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Generator
from typing import Any

import anyio

from playground.errors import PlaygroundError
from playground.openai_api.admission import Admission
from playground.openai_api.errors import ApiError, bad_value
from playground.openai_api.generation import Delta, Outcome, run_request
from playground.openai_api.request import ApiRequest
from playground.openai_api.shaping import Shaper

DONE = "data: [DONE]\n\n"


def sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


def events(request: ApiRequest, admission: Admission, gone: threading.Event) -> Generator[str, None, None]:
    """The stream's lines, produced in a worker thread while the request holds its place in the queue."""
    shaper = Shaper(request)
    outcomes: list[Outcome] = []
    started: set[int] = set()
    with admission.admitted():
        for item in run_request(request, gone.is_set):
            if isinstance(item, Delta):
                yield sse(shaper.delta_chunk(item.index, item.text, item.index not in started))
                started.add(item.index)
            else:
                outcomes.append(item)
                yield sse(shaper.final_chunk(item))
    if request.include_usage:
        yield sse(shaper.usage_chunk(outcomes))
    yield DONE


class Stream:
    """A stream whose first line has been produced: a refusal that comes before it (a full queue, the memory
    budget, a model that cannot load) is still an HTTP error with its status; one after it is an error event."""

    def __init__(self, lines: Generator[str, None, None], first: str, gone: threading.Event) -> None:
        self.lines, self.first, self.gone = lines, first, gone

    @classmethod
    async def start(cls, request: ApiRequest, admission: Admission) -> Stream:
        """Raises ApiError or PlaygroundError when the request fails before its first line."""
        gone = threading.Event()
        lines = events(request, admission, gone)
        first = await anyio.to_thread.run_sync(next, lines)
        return cls(lines, first, gone)

    async def body(self) -> AsyncIterator[str]:
        """The lines, pulled from a worker thread (the runner blocks); when the client disconnects Starlette
        cancels this generator, and the run stops at its next token."""
        try:
            yield self.first
            while (line := await anyio.to_thread.run_sync(next, self.lines, None)) is not None:
                yield line
        except PlaygroundError as exc:
            yield sse({"error": bad_value(str(exc)).response_body()})
        except ApiError as exc:
            yield sse({"error": exc.response_body()})
        finally:
            self.gone.set()
            await anyio.to_thread.run_sync(self.lines.close)

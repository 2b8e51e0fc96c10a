"""The OpenAI-compatible routes, `/v1/models`, `/v1/completions` and `/v1/chat/completions`, served by the
page's own server (see playground/ui/serving.py) so that a Space serves them too."""

from __future__ import annotations

import hmac
import json
import os
import threading
from collections.abc import Callable
from typing import Any

import anyio
from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute

from playground import runner
from playground.errors import PlaygroundError
from playground.limits import api_max_wait_seconds
from playground.models import catalog, public
from playground.openai_api import request as api_request
from playground.openai_api.admission import Admission
from playground.openai_api.cache_scope import KEY_VARIABLE  # when set, the API asks for it (the page stays open)
from playground.openai_api.errors import ApiError, bad_key, bad_value, no_route, unknown_model
from playground.openai_api.generation import Outcome, run_request
from playground.openai_api.shaping import Shaper
from playground.openai_api.streaming import Stream

DISCONNECT_POLL_S = 0.25  # how often a whole (non-streamed) request checks that its client is still there
SERVED = {"/v1/models": "GET", "/v1/completions": "POST", "/v1/chat/completions": "POST"}  # path -> its method
ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def check_key(request: Request) -> None:
    """401 unless the request carries the server's key, when it has one."""
    key = os.environ.get(KEY_VARIABLE)
    if not key:
        return
    sent = request.headers.get("authorization", "")
    scheme, _, token = sent.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise bad_key()


def list_models() -> dict[str, Any]:
    """The bundled models whose package is installed, and on a public deployment the hub ids it allows."""
    names = [row["name"] for row in catalog.list_models() if row["installed"]]
    if public.is_public():
        names += [name for name in catalog.allowed_hub_models() if name not in names]
    return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "playground"}
                                       for name in names]}


def collect(parsed: api_request.ApiRequest, admission: Admission, gone: threading.Event) -> dict[str, Any]:
    """A whole response: every choice run to its end (or until the client has gone), in a worker thread."""
    with admission.admitted():
        outcomes = [item for item in run_request(parsed, gone.is_set) if isinstance(item, Outcome)]
    return Shaper(parsed).response(outcomes)


async def whole(request: Request, parsed: api_request.ApiRequest, admission: Admission) -> dict[str, Any]:
    """`collect`, while watching the connection: a client that goes away stops the run at its next token."""
    gone = threading.Event()
    answer: dict[str, Any] = {}
    refused: list[ApiError | PlaygroundError] = []

    async def run() -> None:
        try:
            answer.update(await anyio.to_thread.run_sync(collect, parsed, admission, gone))
        except (ApiError, PlaygroundError) as exc:  # raised again below, outside the task group's exception group
            refused.append(exc)
        finally:
            tasks.cancel_scope.cancel()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run)
        while not await request.is_disconnected():
            await anyio.sleep(DISCONNECT_POLL_S)
        gone.set()
    if refused:
        raise refused[0]
    return answer


def preflight(parsed: api_request.ApiRequest) -> None:
    """What can be refused before a place in the queue is taken: an unknown model (404), then the runner's
    checks of the prompts and of what the backend refuses from the model's config (400)."""
    try:
        catalog.check_available(parsed.model)
    except PlaygroundError as exc:
        raise unknown_model(str(exc)) from None
    for prompt in parsed.prompts:
        runner.check_prompt(prompt)
    runner.preflight(parsed.spec)


async def _body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_value(f"the request body is not valid JSON ({exc})") from None


def router(page_waiting: Callable[[], int] = lambda: 0) -> APIRouter:
    """The routes; `page_waiting` counts the page's requests waiting in Gradio's queue, ahead of the API's."""
    api_max_wait_seconds()  # a malformed setting is refused as the server starts, in one line
    admission = Admission(page_waiting)
    routes = APIRouter(prefix="/v1")

    async def answer(request: Request, kind: api_request.Kind) -> Response:
        try:
            check_key(request)
            parsed = api_request.parse(await _body(request), kind)
            preflight(parsed)
            if parsed.stream:
                started = await Stream.start(parsed, admission)
                return StreamingResponse(started.body(), media_type="text/event-stream")
            return JSONResponse(await whole(request, parsed, admission))
        except ApiError as exc:
            return exc.response()
        except PlaygroundError as exc:
            return bad_value(str(exc), api_request.param_of(str(exc))).response()

    @routes.get("/models")
    async def models(request: Request) -> Response:
        try:
            check_key(request)
        except ApiError as exc:
            return exc.response()
        return JSONResponse(list_models())

    @routes.post("/completions")
    async def completions(request: Request) -> Response:
        return await answer(request, "completion")

    @routes.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await answer(request, "chat")

    # last: any other path or method under /v1 gets OpenAI's error object (404, or 405 on a served path)
    @routes.api_route("/{path:path}", methods=ANY_METHOD, include_in_schema=False)
    async def elsewhere(request: Request, path: str) -> Response:
        return no_route(request.method, f"/v1/{path}", SERVED).response()

    return routes


def api_routes(page_waiting: Callable[[], int] = lambda: 0) -> list[BaseRoute]:
    """The routes as a list, for FastAPI's `routes` (Gradio's `app_kwargs`)."""
    return list(router(page_waiting).routes)

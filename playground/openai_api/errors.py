"""Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the HTTP status each one has."""

from __future__ import annotations

import math
from dataclasses import dataclass

from starlette.responses import JSONResponse


@dataclass(frozen=True)
class ApiError(Exception):
    """A refusal the client sees as OpenAI's error object; `message` is the playground's one line."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    retry_after_s: int | None = None  # a full queue: when to try again (the Retry-After header)
    allow: str | None = None  # a wrong method: the methods the path takes (the Allow header)

    def response_body(self) -> dict[str, str | None]:
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}

    def response(self) -> JSONResponse:
        headers = {name: str(value) for name, value in (("Retry-After", self.retry_after_s), ("Allow", self.allow))
                   if value is not None}
        return JSONResponse({"error": self.response_body()}, status_code=self.status, headers=headers or None)


def bad_value(message: str, param: str | None = None) -> ApiError:
    """400: a value outside what is allowed, in the CLI's words."""
    return ApiError(400, message, param=param)


def unknown_model(message: str) -> ApiError:
    return ApiError(404, message, param="model", code="model_not_found")


def no_route(method: str, path: str, served: dict[str, str]) -> ApiError:
    """404 for a path under /v1 the API does not serve, 405 for a served path asked with another method (`served`:
    path -> its method), as OpenAI's error object rather than the web framework's `{"detail": ...}`."""
    routes = ", ".join(f"{m} {p}" for p, m in served.items())
    if path in served:
        return ApiError(405, f"{method} {path} is not allowed; use {served[path]} {path} (the API serves {routes})",
                        code="method_not_allowed", allow=served[path])
    return ApiError(404, f"no route {method} {path}; the API serves {routes}", code="unknown_url")


def bad_key() -> ApiError:
    return ApiError(401, "missing or wrong API key: send the server's PLAYGROUND_API_KEY as 'Authorization: Bearer "
                         "<key>'", code="invalid_api_key")


def wait_too_long(waiting: str, wait_s: float, limit_s: float) -> ApiError:
    """429: the generation slot is held for longer than this server lets an API request wait."""
    retry = max(1, math.ceil(wait_s))
    return ApiError(429, f"the generation slot is busy ({waiting}); that is over this server's limit of {limit_s:g} s "
                         f"(PLAYGROUND_API_MAX_WAIT_SECONDS); retry after {retry} s",
                    type="rate_limit_error", code="wait_too_long", retry_after_s=retry)


def queue_full(waiting: int, retry_after_s: int) -> ApiError:
    return ApiError(429, f"the generation queue is full ({waiting} requests waiting); retry after {retry_after_s} s",
                    type="rate_limit_error", code="queue_full", retry_after_s=retry_after_s)

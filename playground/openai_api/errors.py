"""Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the HTTP status each one has."""

from __future__ import annotations

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

    def response_body(self) -> dict[str, str | None]:
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}

    def response(self) -> JSONResponse:
        headers = {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else None
        return JSONResponse({"error": self.response_body()}, status_code=self.status, headers=headers)


def bad_value(message: str, param: str | None = None) -> ApiError:
    """400: a value outside what is allowed, in the CLI's words."""
    return ApiError(400, message, param=param)


def unknown_model(message: str) -> ApiError:
    return ApiError(404, message, param="model", code="model_not_found")


def bad_key() -> ApiError:
    return ApiError(401, "missing or wrong API key: send the server's PLAYGROUND_API_KEY as 'Authorization: Bearer "
                         "<key>'", code="invalid_api_key")


def queue_full(waiting: int, retry_after_s: int) -> ApiError:
    return ApiError(429, f"the generation queue is full ({waiting} requests waiting); retry after {retry_after_s} s",
                    type="rate_limit_error", code="queue_full", retry_after_s=retry_after_s)

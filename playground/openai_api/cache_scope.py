"""Which prefix-store entries an API request may reuse: those of requests with the same `cache_salt` and, where the
server has PLAYGROUND_API_KEY, the same key. A reused prefix answers measurably faster, so a store shared between
tenants would tell one what another sent (the timing side channel vLLM's `cache_salt` closes); the page's sessions
each have a scope of their own and never share with the API."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from playground.openai_api.errors import bad_value

KEY_VARIABLE = "PLAYGROUND_API_KEY"  # when set, the API asks for it as a bearer key (routes.py checks it)


def cache_salt(body: Mapping[str, Any]) -> str:
    """The request's `cache_salt` (vLLM's field): a string, "" when absent; another type is a 400."""
    salt = body.get("cache_salt", "")
    if not isinstance(salt, str):
        raise bad_value(f"cache_salt must be a string, got {type(salt).__name__}", "cache_salt")
    return salt


def scope(salt: str) -> str:
    """The store's scope of a request: the API, a digest of the server's key (never the key itself) and the salt."""
    key = os.environ.get(KEY_VARIABLE, "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:16] if key else "open"
    return f"api:{digest}:{hashlib.sha256(salt.encode()).hexdigest()[:16]}"

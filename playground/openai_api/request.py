"""An OpenAI request body read into what the server runs: prompts or chat turns, the RunSpec, n, echo, logprobs
and stop strings. Every refusal is a 400 naming the field, the value and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from playground.backends.base import TOP_ALTERNATIVES
from playground.errors import PlaygroundError
from playground.limits import max_api_choices, max_new_tokens_cap
from playground.openai_api.cache_scope import cache_salt, scope
from playground.openai_api.errors import ApiError, bad_value
from playground.openai_api.mapping import OPENAI_SPEC_FIELDS, spec_from_fields
from playground.spec import RunSpec, spec_keys

Kind = Literal["completion", "chat"]
RECORDED_TOP = TOP_ALTERNATIVES  # the model's most likely tokens each token record keeps
MAX_TOP_LOGPROBS = 20  # as OpenAI allows; beyond RECORDED_TOP, raw alternatives from a teacher-forced forward
MAX_STOP = 4  # as OpenAI allows
LOGPROBS_MODES = ("raw", "processed")

# OpenAI's fields each endpoint reads (beyond them: RunSpec keys, aliases and our own extensions)
COMMON = ("model", "max_tokens", "n", "stream", "stream_options", "stop", "logit_bias", "response_format", "user",
          *OPENAI_SPEC_FIELDS)
FIELDS: dict[Kind, tuple[str, ...]] = {
    "completion": (*COMMON, "prompt", "echo", "logprobs", "best_of"),
    "chat": (*COMMON, "messages", "logprobs", "top_logprobs", "max_completion_tokens"),
}
EXTENSIONS = ("logprobs_mode", "regex", "choices", "grammar", "min_tokens", "cache_salt")


@dataclass(frozen=True, kw_only=True)
class ApiRequest:
    """One request: the prompts to continue (chat: the last user turn, after `history`) and how."""

    kind: Kind
    model: str
    prompts: tuple[str, ...]
    history: tuple[tuple[str, str], ...]  # chat: earlier (user, assistant) turns
    system: str = ""  # chat: the system (or developer) turn before them, through the model's chat template
    spec: RunSpec  # the first choice's; sampled choices take seed + their index
    n: int
    max_tokens: int  # 0: no generation (echo only)
    echo: bool
    top_logprobs: int | None  # None: no logprobs; else how many alternatives per token (0 to MAX_TOP_LOGPROBS)
    logprobs_mode: str
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    scope: str = ""  # whose prefix-store entries it may reuse: the key's and `cache_salt`'s (cache_scope.py)


def parse(body: Any, kind: Kind) -> ApiRequest:
    """The request, or an ApiError (400) for the first field that is wrong."""
    if not isinstance(body, Mapping):
        raise bad_value(f"the request body must be a JSON object, got {type(body).__name__}")
    allowed = (*FIELDS[kind], *EXTENSIONS, *spec_keys())
    unknown = sorted(str(k) for k in body if k not in allowed)
    if unknown:
        raise bad_value(f"unknown field(s) {', '.join(unknown)}; allowed: the OpenAI fields "
                        f"{', '.join(FIELDS[kind])}, the extensions {', '.join(EXTENSIONS)}, and every RunSpec key",
                        unknown[0])
    _check_number_types(body)
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad_value(f"model must be a model name such as smollm2-135m, got {model!r}", "model")
    prompts, history, system = _prompts(body) if kind == "completion" else _chat(body)
    n = _choice_count(body, len(prompts))
    echo = kind == "completion" and _flag(body, "echo")
    max_tokens = _max_tokens(body, kind, echo)
    top = _top_logprobs(body, kind)
    mode = body.get("logprobs_mode", "raw")
    if mode not in LOGPROBS_MODES:
        raise bad_value(f"logprobs_mode {mode!r} is not one of: {', '.join(LOGPROBS_MODES)}", "logprobs_mode")
    _check_best_of(body, n)
    if top is not None and top > RECORDED_TOP and mode == "processed":
        raise bad_value(f"{'logprobs' if kind == 'completion' else 'top_logprobs'}={top} with logprobs_mode "
                        f"'processed': the token records keep {RECORDED_TOP} alternatives; allowed: 0 to "
                        f"{RECORDED_TOP}, or logprobs_mode 'raw' (up to {MAX_TOP_LOGPROBS})",
                        "logprobs" if kind == "completion" else "top_logprobs")
    try:
        spec = spec_from_fields(body, kind, n, max(max_tokens, 1))
    except PlaygroundError as exc:
        raise bad_value(str(exc), param_of(str(exc))) from None
    if n > 1 and top is not None and spec.num_return_sequences > 1:
        raise bad_value("logprobs with n > 1 on a beam strategy: the token records cover the first returned "
                        "sequence only; allowed: n=1, or no logprobs", "n")
    stream, include_usage = _stream(body)
    salt = cache_salt(body)
    if stream and echo and max_tokens == 0:
        raise bad_value("stream with max_tokens=0 has nothing to stream; allowed: stream=false", "stream")
    return ApiRequest(kind=kind, model=model, prompts=prompts, history=history, system=system, spec=spec, n=n,
                      max_tokens=max_tokens, echo=echo, top_logprobs=top, logprobs_mode=mode, stop=_stop(body),
                      stream=stream, include_usage=include_usage, scope=scope(salt))


def _choice_count(body: Mapping[str, Any], prompts: int) -> int:
    n = _integer(body, "n", 1, 1, max_api_choices())
    if n * prompts > max_api_choices():
        raise bad_value(f"n={n} over {prompts} prompts asks for {n * prompts} choices; allowed: at most "
                        f"{max_api_choices()} per request (PLAYGROUND_MAX_API_CHOICES)", "n")
    return n


def _check_best_of(body: Mapping[str, Any], n: int) -> None:
    best_of = body.get("best_of")
    if best_of is not None and best_of != n:
        raise bad_value(f"best_of={best_of!r} is not supported; allowed: equal to n ({n}) or absent", "best_of")


def param_of(message: str) -> str | None:
    """The field a RunSpec message names first ("top_p=0 is out of range ..." -> "top_p")."""
    head = message.split()[0] if message else ""
    name = head.split("=")[0].split("[")[0]
    fields = {*spec_keys(), *FIELDS["completion"], *FIELDS["chat"], *EXTENSIONS}
    return name if name in fields else None


# OpenAI's numeric fields that RunSpec reads: a value of another type is refused as a type error, before RunSpec
# checks its range
NUMBER_FIELDS = {"temperature": "a number", "top_p": "a number", "presence_penalty": "a number",
                 "frequency_penalty": "a number", "seed": "an integer"}


def _type_name(value: Any) -> str:
    """What a JSON value is, as a type error names it ("a string", "a boolean")."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return "a number with a fraction" if isinstance(value, float) else type(value).__name__


def _wrong_type(name: str, wanted: str, value: Any, allowed: str = "") -> ApiError:
    return bad_value(f"{name} must be {wanted}, got {_type_name(value)}: {_short(value)}"
                     + (f"; allowed: {allowed}" if allowed else ""), name)


def _check_number_types(body: Mapping[str, Any]) -> None:
    """A numeric OpenAI field holding a string, a boolean, an object or an array is a type error, named as one."""
    for name, wanted in NUMBER_FIELDS.items():
        value = body.get(name)
        if value is None:
            continue
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (wanted == "an integer" and not whole)):
            raise _wrong_type(name, wanted, value)


def _integer(body: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong_type(name, "an integer", value, f"whole numbers from {low} to {high}")
    if not low <= value <= high:
        raise bad_value(f"{name}={value!r} is out of range; allowed: whole numbers from {low} to {high}", name)
    return value


def _flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_value(f"{name} must be true or false, got {value!r}", name)
    return value


def _prompts(body: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...], str]:
    prompt = body.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise bad_value(f"prompt must be a string or a non-empty list of strings (token ids are not taken), got "
                        f"{_short(prompt)}", "prompt")
    return tuple(prompts), (), ""


ROLES = ("user", "assistant")


SYSTEM_ROLES = ("system", "developer")  # OpenAI's newer models call the system turn "developer"


def _chat(body: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...], str]:
    """The last user turn, the (user, assistant) pairs before it, as the page's chat holds a conversation, and
    the system turn that may open the conversation."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_value(f"messages must be a non-empty list of {{role, content}} objects, got {_short(messages)}",
                        "messages")
    turns = [_message(i, m) for i, m in enumerate(messages)]
    system = turns.pop(0)[1] if turns[0][0] in SYSTEM_ROLES else ""
    opened = 1 if system else 0  # where the alternating turns start in `messages`
    if not turns:
        raise bad_value("messages hold only a system turn; allowed: a system turn, then user and assistant turns "
                        "alternating and ending with user", "messages")
    for i, (role, _) in enumerate(turns):
        want = ROLES[i % 2] if i < len(turns) - 1 else "user"
        if role != want:
            raise bad_value(f"messages[{i + opened}].role is {role!r}; allowed: one system (or developer) turn "
                            "first, then user and assistant turns alternating and ending with user", "messages")
    texts = [text for _, text in turns]
    return (texts[-1],), tuple(zip(texts[:-1:2], texts[1:-1:2], strict=True)), system


def _message(index: int, message: Any) -> tuple[str, str]:
    if not isinstance(message, Mapping) or "role" not in message:
        raise bad_value(f"messages[{index}] must be an object with role and content, got {_short(message)}",
                        "messages")
    content = message.get("content")
    if isinstance(content, list):  # content parts: only text ones
        kinds = {part.get("type") if isinstance(part, Mapping) else None for part in content}
        if kinds != {"text"}:
            raise bad_value(f"messages[{index}].content holds parts of type {sorted(map(str, kinds))}; allowed: "
                            "text only", "messages")
        content = "".join(str(part.get("text", "")) for part in content)
    if not isinstance(content, str):
        raise bad_value(f"messages[{index}].content must be text, got {_short(content)}", "messages")
    return str(message["role"]), content


def _max_tokens(body: Mapping[str, Any], kind: Kind, echo: bool) -> int:
    name = "max_completion_tokens" if kind == "chat" and "max_completion_tokens" in body else "max_tokens"
    if "max_new_tokens" in body and name in body:
        raise bad_value(f"give {name} or max_new_tokens, not both", name)
    name = "max_new_tokens" if "max_new_tokens" in body else name
    default = 16 if kind == "completion" else RunSpec().max_new_tokens  # OpenAI's completions default: 16
    value = _integer(body, name, default, 0, max_new_tokens_cap())
    if value == 0 and not echo:
        raise bad_value(f"{name}=0 generates nothing; allowed: 0 with echo (the prompt's log-probabilities), else "
                        f"1 to {max_new_tokens_cap()}", name)
    return value


def _top_logprobs(body: Mapping[str, Any], kind: Kind) -> int | None:
    """How many alternatives each token's logprobs list; None when no logprobs are asked for."""
    if kind == "completion":
        if body.get("logprobs") is None:
            return None
        return _integer(body, "logprobs", 0, 0, MAX_TOP_LOGPROBS)
    wanted = _flag(body, "logprobs")
    if body.get("top_logprobs") is not None and not wanted:
        raise bad_value("top_logprobs needs logprobs=true", "top_logprobs")
    return _integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS) if wanted else None


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if (not isinstance(stops, list) or len(stops) > MAX_STOP
            or not all(isinstance(s, str) and s for s in stops)):
        raise bad_value(f"stop must be a non-empty string or a list of up to {MAX_STOP} of them, got {_short(stop)}",
                        "stop")
    return tuple(stops)


def _stream(body: Mapping[str, Any]) -> tuple[bool, bool]:
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise bad_value("stream_options needs stream=true", "stream_options")
    if not isinstance(options, Mapping) or set(options) - {"include_usage"}:
        raise bad_value(f"stream_options must be {{\"include_usage\": true|false}}, got {_short(options)}",
                        "stream_options")
    return stream, _flag(options, "include_usage")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


__all__ = ["ApiError", "ApiRequest", "parse"]

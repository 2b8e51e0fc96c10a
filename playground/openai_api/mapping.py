"""OpenAI's sampling fields and our extensions mapped onto RunSpec keys, so that the API, the page and the CLI
describe a run the same way (every RunSpec key is also taken by its own name)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from playground import registry
from playground.errors import PlaygroundError
from playground.spec import RunSpec, spec_keys

# OpenAI's fields that are RunSpec keys of the same name and meaning
OPENAI_SPEC_FIELDS = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty")
# keys a request sets through an OpenAI field, not by their RunSpec name
OWNED = {"num_return_sequences": "n"}
# common names other servers take for RunSpec keys (top_k, min_p and repetition_penalty are RunSpec's own names)
ALIASES = {"min_tokens": "min_new_tokens"}
# our constraint extensions: the field, and the constraint kind its text is
CONSTRAINT_FIELDS = {"regex": "regex", "choices": "choice", "grammar": "grammar"}


def spec_from_fields(body: Mapping[str, Any], kind: str, n: int, max_new_tokens: int) -> RunSpec:
    """The RunSpec a request describes; raises PlaygroundError in RunSpec's words."""
    for key, field in OWNED.items():
        if key in body:
            raise PlaygroundError(f"{key} is set by the OpenAI field {field!r}; send {field} instead")
    values: dict[str, Any] = {k: body[k] for k in spec_keys() if k in body and body[k] is not None}
    values["model"], values["max_new_tokens"] = body["model"], max_new_tokens
    if isinstance(values.get("logit_bias"), Mapping):  # OpenAI's object; the RunSpec key holds it as JSON text
        values["logit_bias"] = json.dumps(values["logit_bias"]) if values["logit_bias"] else ""
    for alias, key in ALIASES.items():
        if body.get(alias) is not None:
            if key in values:
                raise PlaygroundError(f"give {alias} or {key}, not both")
            values[key] = body[alias]
    values |= _constraint(body)
    values["chat"] = _chat_mode(kind, values.get("chat"))
    return RunSpec.from_dict(_with_strategy(values, n))


def _with_strategy(values: dict[str, Any], n: int) -> dict[str, Any]:
    """OpenAI's conventions on top of the strategy: temperature 0 is greedy, anything else samples (unless a
    strategy is named), sampling has no top-k, and n is either n seeded samples or n returned beams."""
    temperature = values.get("temperature")
    if "strategy" not in values:
        values["strategy"] = "greedy" if temperature == 0 else "sampling"
    if values["strategy"] not in registry.strategy_names():
        return values  # RunSpec names the strategies it takes
    strategy = registry.strategy(values["strategy"])
    if temperature == 0 and strategy.sampling != "always":
        del values["temperature"]  # a greedy choice: no temperature divides the logits
    if strategy.sampling != "never" and "top_k" not in values:
        values["top_k"] = 0  # the whole distribution, as every OpenAI server samples it
    if "num_return_sequences" in strategy.knobs:
        values["num_return_sequences"] = n  # beam strategies: n returned sequences of one search
    elif n > 1 and not strategy.samples(bool(values.get("assisted_sampling"))):
        raise PlaygroundError(f"n={n} needs a strategy that samples (n seeded samples) or one that returns several "
                              f"sequences (n returned beams); strategy {values['strategy']!r} gives one answer")
    return values


def _chat_mode(kind: str, asked: Any) -> bool:
    """Chat completions always apply the chat template; completions continue the raw text unless asked."""
    if kind == "chat":
        if asked is False:
            raise PlaygroundError("chat=false on /v1/chat/completions; use /v1/completions for raw text")
        return True
    return bool(asked)


def _constraint(body: Mapping[str, Any]) -> dict[str, str]:
    """response_format and our regex / choices / grammar fields as the `constraint` knobs (one at most)."""
    found: dict[str, dict[str, str]] = {}
    response_format = body.get("response_format")
    if response_format is not None:
        schema = _response_schema(response_format)
        if schema is not None:
            found["response_format"] = {"constraint": "json_schema", "constraint_text": schema}
    for field, kind in CONSTRAINT_FIELDS.items():
        value = body.get(field)
        if value is None:
            continue
        if field == "choices" and isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = "\n".join(value)
        if not isinstance(value, str):
            raise PlaygroundError(f"{field} must be text{' or a list of strings' if field == 'choices' else ''}, "
                                  f"got {value!r}")
        found[field] = {"constraint": kind, "constraint_text": value}
    if "constraint" in body:
        found["constraint"] = {}
    if len(found) > 1:
        raise PlaygroundError(f"{' and '.join(found)} each constrain the output; allowed: one of them")
    return next(iter(found.values()), {})


def _response_schema(response_format: Any) -> str | None:
    """The JSON schema a response_format asks for (json_object: any object); None for plain text."""
    kind = response_format.get("type") if isinstance(response_format, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return json.dumps({"type": "object"})
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise PlaygroundError("response_format.json_schema.schema must be a JSON schema object")
        return json.dumps(schema)
    raise PlaygroundError(f"response_format {response_format!r} is not one of: {{'type': 'text'}}, "
                          "{'type': 'json_object'}, {'type': 'json_schema', 'json_schema': {'schema': ...}}")

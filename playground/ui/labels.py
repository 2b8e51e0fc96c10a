"""Column names for the table, the plots, the divergence list and the beam panel: each says what sets its column
apart from the others on the page.

A name starts with the column's number, strategy and cache (backend, weights and torch.compile when not the
defaults), then every other setting whose value differs between the columns that read it: four sampling columns
that differ only in their DRY multiplier are "sampling · dynamic · DRY multiplier 0.8" and so on, not four
"sampling · dynamic". A setting a column does not read (greedy's temperature) is left out of its name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from playground import registry
from playground.ui.columns import relevant_keys, spec_defaults
from playground.ui.settings import ColumnSettings

# keys the first part of a name already says (strategy and draft source, cache, backend, weights, compile)
NAMED_FIRST = ("strategy", "cache", "backend", "weights", "torch_compile", "assistant", "prompt_lookup",
               "assisted_sampling")
CONSTRAINT_NAMES = {"none": "no constraint", "regex": "regex", "json_schema": "schema", "choice": "choices",
                    "grammar": "grammar"}
TEXT_SHOWN = 16  # characters of a text setting (a schema, a sampler order) quoted in a name, from where it differs
_OFF = re.compile(r"\s*\((.*?) = (off|default)\)\s*$")  # a knob label's "(0 = off)"


def base_label(position: int, settings: ColumnSettings) -> str:
    """The column's number, strategy (and draft source), cache, and backend, weights and torch.compile when not
    the defaults."""
    strategy = str(settings.get("strategy", spec_defaults()["strategy"]))
    if registry.strategy(strategy).drafts:
        lookup = settings.get("prompt_lookup")
        source = f"prompt lookup n={lookup}" if lookup else f"draft {settings.get('assistant')}"
        strategy += f" ({source}, sampled)" if settings.get("assisted_sampling") else f" ({source})"
    parts = [f"{position + 1}: {strategy}", settings.get("cache", spec_defaults()["cache"])]
    if settings.get("backend", "torch") != "torch":
        parts.append(settings["backend"])
    if settings.get("weights", "fp32") != "fp32":
        parts.append(settings["weights"])
    mode = settings.get("torch_compile", "off")
    if mode != "off":
        parts.append("torch.compile" if mode == "default" else f"torch.compile {mode}")
    return " · ".join(parts)


def _read(settings: ColumnSettings) -> dict[str, Any]:
    """Every key the column reads, with its value (RunSpec's default where the settings leave it out)."""
    defaults = spec_defaults()
    keys = relevant_keys(settings.get("strategy", defaults["strategy"]), settings.get("cache", defaults["cache"]),
                         settings.get("backend", defaults["backend"]), bool(settings.get("assisted_sampling")))
    return {k: settings.get(k, defaults.get(k)) for k in keys if k not in NAMED_FIRST}


def setting_name(key: str, value: Any, differs_at: int = 0) -> str:
    """One setting as a name part: "DRY multiplier 0.8", "DRY multiplier off", "schema", "smollm2-135m"; a long
    text quoted from a little before `differs_at`, where it departs from the other columns'."""
    if key == "constraint":
        return CONSTRAINT_NAMES.get(str(value), str(value))
    if key == "model":
        return str(value)
    title = registry.knob(key).title if registry.has_knob(key) else key
    name = _OFF.sub("", title).replace("_", " ")
    off = _OFF.search(title)
    if off and _key(value) == _key(registry.knob(key).parse(off.group(1)) if off.group(2) == "off" else ""):
        return f"{name} {off.group(2)}"
    if isinstance(value, bool):
        return f"{name} {'on' if value else 'off'}"
    if isinstance(value, float):
        return f"{name} {value:g}"
    if isinstance(value, str) and len(value) > TEXT_SHOWN:
        start = max(0, min(differs_at - 4, len(value) - TEXT_SHOWN))
        shown = value[start:start + TEXT_SHOWN]
        return f"{name} “{'…' if start else ''}{shown}{'…' if start + TEXT_SHOWN < len(value) else ''}”"
    return f"{name} {value}"


def _key(value: Any) -> str:
    """A value as compared between columns: a slider's 1.0 and a saved 1 are one value."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    return repr(value)


def differing(columns: Sequence[ColumnSettings]) -> list[list[str]]:
    """Per column, the keys it reads whose value differs from another column that reads them, in card order.
    A constraint's text is named only where the constraints are of one kind."""
    read = [_read(c) for c in columns]
    keys = list(dict.fromkeys(k for values in read for k in values))
    differs = {k for k in keys if len({_key(values[k]) for values in read if k in values}) > 1}
    if "constraint" in differs:
        differs.discard("constraint_text")
    return [[k for k in keys if k in differs and k in values] for values in read]


def _common_start(texts: Sequence[str]) -> int:
    """How many leading characters every text shares."""
    return len(os.path.commonprefix(list(texts)))


def column_labels(columns: Sequence[ColumnSettings]) -> list[str]:
    """Each column's name, in page order: its base label, then the settings in which it differs from the others."""
    parts = differing(columns)
    read = [_read(c) for c in columns]
    texts = {k: _common_start([str(values[k]) for values in read if k in values]) for keys in parts for k in keys}
    return [" · ".join([base_label(position, settings)] + [setting_name(k, values[k], texts[k]) for k in keys])
            for position, (settings, values, keys) in enumerate(zip(columns, read, parts, strict=True))]

"""What a strategy records beside every strategy's token records, where it lands in the Result, and its meaning.

A strategy entry declares its records here (`Strategy.token_records`, `Strategy.run_records`), so that the Result
and the page need no branch per strategy: result.py asks the running strategy's declarations to build their
values from the backend's output, and gives every other registered strategy's keys None, so a Result's keys do
not depend on which strategy ran. The builders are named by `lazy("module", "name")`, as backend code is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A playground.backends.base.GenerationOutput and a tokenizer: the registry sits below both (layers 5 and 6)
Output = Any
Tokenizer = Any


@dataclass(frozen=True, kw_only=True)
class RecordField:
    """One value of a record: its name, type, unit and a one-line meaning (docs/api.md's tables say the same)."""

    name: str
    kind: str  # as JSON holds it: "int", "float", "bool", "str", "list[int]", "list[float]", "list[str]"
    meaning: str
    unit: str = ""  # "" where the value has none (an id, a count, a text)


@dataclass(frozen=True, kw_only=True)
class TokenRecords:
    """A strategy's own record of each generated token of the first sequence, at `tokens[i].<key>`."""

    key: str
    fields: tuple[RecordField, ...]
    # (tokenizer, output) -> one value per token of output.sequences[0] (None where the token has none), or None
    # where the backend recorded nothing: then every token's key is None
    build: Callable[[Tokenizer, Output], list[Any] | None]
    shape: str = "one record"  # how the records are held: "a list, most probable first"


@dataclass(frozen=True, kw_only=True)
class RunRecords:
    """A strategy's own record of the whole run, at the Result's top-level `key`, or at `extra.<key>` when
    `in_extra` (where a new strategy's run records go: the Result's top level is a contract)."""

    key: str
    fields: tuple[RecordField, ...]
    # (tokenizer, output) -> the value, or None where the backend recorded nothing; None: the backend puts the
    # value in its output's `extra` itself (a count), and the declaration only says what it means
    build: Callable[[Tokenizer, Output], Any] | None = None
    in_extra: bool = False
    shape: str = "one value"  # how the records are held: "a list, one per verification step"

    @property
    def path(self) -> str:
        """Where it lands, as docs/api.md writes it."""
        return f"extra.{self.key}" if self.in_extra else self.key

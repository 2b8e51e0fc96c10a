"""Chat mode's shared conversation: every column answers the same user turns, each keeping its own replies."""

from __future__ import annotations

from typing import Any

# Page prompt formats -> RunSpec.chat. "auto" (single turn) applies the chat template only for instruct models.
MODES = {"auto": None, "chat": True, "raw": False}
MODE_LABELS = [("single turn", "auto"), ("multi-turn chat", "chat"), ("raw completion", "raw")]

Conversation = list[dict[str, Any]]  # [{"user": str, "replies": {column index: reply}}, ...]


def history(conversation: Conversation, index: int) -> list[tuple[str, str]]:
    """Earlier (user, assistant) turns as column `index` saw them; turns it did not answer are left out."""
    return [(turn["user"], turn["replies"][index]) for turn in conversation if index in turn["replies"]]


def messages(conversation: Conversation, index: int, pending: str | None = None,
             reply: str | None = None) -> list[dict[str, str]]:
    """The column's transcript for gr.Chatbot, with the turn being answered now at the end."""
    shown: list[dict[str, str]] = []
    for user, assistant in history(conversation, index):
        shown += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    if pending is not None:
        shown.append({"role": "user", "content": pending})
        if reply:
            shown.append({"role": "assistant", "content": reply})
    return shown


def record_turn(conversation: Conversation, prompt: str, replies: dict[int, str]) -> Conversation:
    """A new conversation with this turn appended (gr.State values are not mutated in place)."""
    if not replies:
        return list(conversation)
    return [*conversation, {"user": prompt, "replies": dict(replies)}]

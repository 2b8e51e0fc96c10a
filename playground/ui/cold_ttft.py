"""Chat mode's cold TTFT on demand: a column's last turn run again cold (`reuse` off), so that its TTFT can be read
beside the warm turn's, which restored the earlier turns from the prefix store ("cold TTFT 0.41 s vs warm 0.05 s").

The cold run goes through the generation slot as any run does, with the turn's own settings (its Result's spec)
and history, and generates one token: TTFT is the prefill and the first token's step. It replaces nothing the
column shows (the transcript, the output, the Result the metrics table reads) and leaves nothing in the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground import runner
from playground.errors import PlaygroundError
from playground.events import DoneEvent
from playground.generation_slot import Holder
from playground.result import Result
from playground.spec import RunSpec
from playground.ui.chat import Conversation, history
from playground.ui.events import Updates, on_private, writes
from playground.ui.live import LIVE_RUNS
from playground.ui.reuse_view import page_scope

BUTTON_LABEL = "measure cold TTFT"


@dataclass(frozen=True)
class ColdTtft:
    """A column's button and the line it writes, shown in chat mode only."""

    button: gr.Button
    note: gr.Markdown

    @property
    def shown(self) -> tuple[gr.Button, gr.Markdown]:
        """What chat mode shows and hides."""
        return self.button, self.note


def cold_ttft_controls(index: int) -> ColdTtft:
    """The column's controls, inside its output card (they follow the card's visibility)."""
    button = gr.Button(BUTTON_LABEL, size="sm", visible=False, elem_id=f"cold-ttft-{index}")
    note = gr.Markdown("", visible=False, elem_id=f"cold-ttft-note-{index}")
    return ColdTtft(button, note)


def compared(cold: Result, warm: Result) -> str:
    """"cold TTFT 0.41 s vs warm 0.05 s (reused 812 of 845 prompt tokens)"."""
    cold_s, warm_s = cold["metrics"]["ttft_s"], warm["metrics"]["ttft_s"]
    if cold_s is None:
        return "the cold run gave no token, so it has no TTFT"
    line = f"cold TTFT {cold_s:.2f} s vs warm {warm_s:.2f} s" if warm_s is not None else f"cold TTFT {cold_s:.2f} s"
    record = warm.get("reuse")
    if record is not None and record["reused_tokens"]:
        line += f" (reused {record['reused_tokens']} of {record['prompt_tokens']} prompt tokens)"
    elif record is not None:
        line += " (the turn was cold too: nothing was reused)"
    return line


def last_turn(conversation: Conversation, index: int) -> tuple[str, list[tuple[str, str]]] | None:
    """The column's last answered user turn and the history it was answered after; None before its first."""
    for at in range(len(conversation) - 1, -1, -1):
        if index in conversation[at]["replies"]:
            return conversation[at]["user"], history(conversation[:at], index)
    return None


def measure(conversation: Conversation, warm: Result | None, index: int, session: str) -> str:
    """The column's last turn run cold, one token, in its own settings; the line comparing the two TTFTs."""
    turn = last_turn(conversation, index)
    if turn is None or warm is None:
        raise PlaygroundError("run a chat turn in this column first")
    prompt, earlier = turn
    spec = RunSpec.from_dict({**warm["spec"], "reuse": False, "max_new_tokens": 1, "min_new_tokens": 0,
                              "repeats": 1})
    for event in runner.run(prompt, spec, history=earlier, judged=False, holder=Holder("a cold TTFT", owner=session),
                            scope=page_scope(session, index)):
        if isinstance(event, DoneEvent):
            return compared(event.result, warm)
    raise RuntimeError("the cold run ended without a result")


def cold_ttft_line(conversation: Conversation, outcome: dict[str, Any] | None, index: int, session: str) -> str:
    """What column `index`'s button writes: the comparison, or why there is none (a run of this page under way,
    no chat turn yet, a refusal)."""
    doing = LIVE_RUNS.doing(session)
    if doing is not None:
        return f"⚠ not measured: {doing} is under way"
    results = (outcome or {}).get("results") or []  # by column slot (ui.outcome.Outcome)
    try:
        with LIVE_RUNS.working(session, "a cold TTFT"):
            return measure(conversation, results[index] if index < len(results) else None, index, session)
    except PlaygroundError as exc:
        return f"⚠ not measured: {exc}"


def wire_cold_ttft(controls: list[ColdTtft], conversation: gr.State, results: gr.State) -> None:
    """Each column's button: queued (it waits for the generation slot), its progress on its own line."""
    for index, cold in enumerate(controls):
        @writes(cold.note)
        def click(talk: Conversation, outcome: dict[str, Any] | None, request: gr.Request,
                  index: int = index, cold: ColdTtft = cold) -> Updates:
            return {cold.note: cold_ttft_line(talk, outcome, index, request.session_hash or "")}

        on_private(cold.button.click, click, [conversation, results], queue=True, show_progress_on=[cold.note])

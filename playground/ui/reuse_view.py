"""What the prefix store did for a column's run, in the words its notice shows, and the scope its runs keep their
caches in: one per page session and column, so that no visitor's run starts from another's (a reused prefix
answers faster, which would tell one visitor what another typed) and no column's timing borrows another's prefill."""

from __future__ import annotations

from playground.result import Result


def page_scope(session: str, column: int) -> str | None:
    """The prefix store's scope of a column of a page session; None (no store) for a caller without a session."""
    return f"page:{session}:{column}" if session else None


def reuse_words(result: Result) -> str | None:
    """"reused 812 of 845 prompt tokens · TTFT 0.04 s" where the run started from a kept cache; the reason in one
    line where it could not (a cache that is not exact under reuse); None where reuse was off or not asked."""
    record = result.get("reuse")
    if record is None:
        return None
    if record["reused_tokens"]:
        ttft = result["metrics"]["ttft_s"]
        timing = f" · TTFT {ttft:.2f} s" if ttft is not None else ""
        return f"reused {record['reused_tokens']} of {record['prompt_tokens']} prompt tokens{timing}"
    note = record["note"]
    return None if note is None or note.startswith("reuse is off") else f"prefilled whole: {note}"

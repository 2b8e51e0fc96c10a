"""What the prefix store did for a column's run, in the words its notice shows, and the scope its runs keep their
caches in: one per page session and column, so that no visitor's run starts from another's (a reused prefix
answers faster, which would tell one visitor what another typed) and no column's timing borrows another's prefill."""

from __future__ import annotations

from playground.backends.prefix_store import ReuseRecord
from playground.result import Result


def page_scope(session: str, column: int) -> str | None:
    """The prefix store's scope of a column of a page session; None (no store) for a caller without a session."""
    return f"page:{session}:{column}" if session else None


def reuse_words(result: Result) -> str | None:
    """"reused 812 of 845 prompt tokens · TTFT 0.04 s" where the run started from a kept cache, and how it differs
    from the cold run where that was measured (a restored cache); the reason in one line where it could not start
    from one; None where reuse was off or not asked."""
    record = result.get("reuse")
    if record is None:
        return None
    if record["reused_tokens"]:
        ttft = result["metrics"]["ttft_s"]
        timing = f" · TTFT {ttft:.2f} s" if ttft is not None else ""
        return f"reused {record['reused_tokens']} of {record['prompt_tokens']} prompt tokens{timing}{_vs_cold(record)}"
    note = record["note"]
    return None if note is None or note.startswith("reuse is off") else f"prefilled whole: {note}"


def _vs_cold(record: ReuseRecord) -> str:
    """" · differs from cold: KL 3.1e-04 nats, first at new token 0" (or the same as cold, with its KL); empty where
    the warm run was not measured against the cold one (the exact caches)."""
    kl = record.get("kl_vs_cold")
    if kl is None:
        return ""
    if record["exact"]:
        return f" · same as cold (KL {kl:.1e})"
    first = record.get("first_difference")
    where = f"first at new token {first}" if first is not None else "the same most likely tokens"
    return f" · differs from cold: KL {kl:.1e} nats, {where}"

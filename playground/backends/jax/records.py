"""Device StepInfo rows -> the backends' common TokenInfo records (the decode chunks' and the verify passes')."""

from __future__ import annotations

from playground.backends.base import CUT_STAGES, TokenInfo
from playground.backends.jax.sampling import StepInfo


def token_records(info: StepInfo, count: int) -> list[TokenInfo]:
    """The first `count` host StepInfo rows as the backends' common TokenInfo records."""
    rows = [row[:count] for row in info]
    return [{"p": float(p), "entropy": float(h), "p_model": float(q), "entropy_model": float(hq),
             "top": list(zip(ids.tolist(), top_p.tolist(), top_q.tolist(), strict=True)),
             "top_cut": [CUT_STAGES[c] for c in cut.tolist()]}
            for p, h, q, hq, ids, top_p, top_q, cut in zip(*rows, strict=True)]

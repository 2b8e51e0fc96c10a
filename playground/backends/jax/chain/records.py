"""Device StepInfo rows -> the backends' common TokenInfo records, and the token stream a run keeps of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from playground.backends.base import TokenInfo
from playground.backends.jax.chain.token_choice import StepInfo


def token_records(info: StepInfo, count: int, stages: tuple[str, ...],
                  carried: tuple[str, ...] = ()) -> list[TokenInfo]:
    """The first `count` host StepInfo rows as the backends' common TokenInfo records; `stages` names the
    chain's stages in order (a cut index i > 0 is stages[i - 1]), `carried` the state its stages carry."""
    rows = [row[:count] for row in info]
    records: list[TokenInfo] = []
    for p, h, q, hq, ids, top_p, top_q, cut, removed, moved, state in zip(*rows, strict=True):
        record: TokenInfo = {
            "p": float(p), "entropy": float(h), "p_model": float(q), "entropy_model": float(hq),
            "top": list(zip(ids.tolist(), top_p.tolist(), top_q.tolist(), strict=True)),
            "top_cut": [stages[c - 1] if c else None for c in cut.tolist()],
            "stages": [(name, int(n), float(m)) for name, n, m in zip(stages, removed.tolist(), moved.tolist(),
                                                                    strict=True)]}
        if carried:
            record["state"] = dict(zip(carried, map(float, state.tolist()), strict=True))
        records.append(record)
    return records


@dataclass
class Streamed:
    """What reached the host token by token: the tokens, their records and when each arrived."""

    tokens: list[int] = field(default_factory=list)
    info: list[TokenInfo] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def add(self, tokens: list[int], info: StepInfo, now: float, stages: tuple[str, ...],
            carried: tuple[str, ...] = ()) -> None:
        """A call's tokens and their first len(tokens) host StepInfo rows, on the host since `now`."""
        self.tokens += tokens
        self.info += token_records(info, len(tokens), stages, carried)
        self.times += [now] * len(tokens)

"""The beam tree both backends return: each step's candidates as BeamNodes, which continued, the returned path.

Both backends describe a step the way transformers' beam search weighs it: C candidates, best first, each
extending one running beam; some stop (EOS or the length limit); the best K that did not stop continue, in
that order, and become the beams the next step's candidates point back to.
"""

from __future__ import annotations

from collections.abc import Sequence

from playground.strategy_records.beam import BeamNode


class BeamTree:
    """Steps of BeamNodes, built one step at a time."""

    def __init__(self) -> None:
        self.steps: list[list[BeamNode]] = []
        self._live: list[int] = []  # node index (in the last step) of each running beam, in beam order

    def add_step(self, scores: Sequence[float], tokens: Sequence[int], beams: Sequence[int]) -> None:
        """A step's candidates: cumulative score, token, and the running beam each extends."""
        self.steps.append([
            {"parent": self._live[beam] if self._live else None, "token": int(token), "score": float(score),
             "kept": False, "finished": False, "chosen": False}
            for score, token, beam in zip(scores, tokens, beams, strict=True)])

    def select(self, finished: Sequence[bool], kept: Sequence[int]) -> None:
        """Which of the last step's candidates stopped, and which (by index, in beam order) continue."""
        nodes = self.steps[-1]
        for node, done in zip(nodes, finished, strict=True):
            node["finished"] = bool(done)
        for k in kept:
            nodes[k]["kept"] = not nodes[k]["finished"]
        self._live = [int(k) for k in kept]

    def leading(self) -> list[int]:
        """The new tokens of the first running beam, the best (both searches keep their beams best first)."""
        if not self.steps or not self._live:
            return []
        tokens: list[int] = []
        index: int | None = self._live[0]
        for step in reversed(self.steps):
            if index is None:
                break
            tokens.append(step[index]["token"])
            index = step[index]["parent"]
        return tokens[::-1]

    def tree(self, best: list[int]) -> list[list[BeamNode]]:
        """The steps, with the path of the best returned sequence (its new tokens) marked as chosen."""
        parent: int | None = None
        for step, token in zip(self.steps, best, strict=False):
            match = next((i for i, n in enumerate(step) if n["token"] == token and n["parent"] == parent), None)
            if match is None:
                break
            step[match]["chosen"] = True
            parent = match
        return self.steps

"""Step mode's branch tree of one column: every token stepped, picked or typed, as nodes under the prompt.

A node is one token; its path from the prompt is the text it ends. Stepping adds children to the current node,
a candidate picked at a node's position adds a sibling (a fork), typed text adds a chain of forced children,
and any node can become the current one again (resumed). A branch is a path that ends at a leaf. Pure data, so
that the page's handlers and the tests share it; gr.State keeps one per column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

How = Literal["drawn", "picked", "typed"]


@dataclass
class Node:
    """One token of the tree."""

    token: int
    text: str
    parent: int | None  # the parent node's index; None: the first token after the prompt
    how: How  # the column's own step drew it, a person picked it among the candidates, or typed it
    logprob: float | None  # ln p_model: the model's own log-probability (None: typed, not scored)
    record: dict[str, Any] | None = None  # the token record of its step: the candidates at its position
    ended: bool = False  # the text ended after it (an end-of-text token, or the model stopped)


@dataclass
class Branch:
    """A path from the prompt to a leaf, as the branch tree lists it."""

    leaf: int
    text: str
    forked_at: int | None  # the position where it left the branch it came from; None: the first branch
    logprob: float  # the sum of its tokens' ln p_model that are known
    unscored: int  # typed tokens, whose p_model no step computed
    length: int


@dataclass
class StepTree:
    """One column's tree and the node it stands at (None: at the prompt, nothing stepped)."""

    spec: dict[str, Any]  # the column's RunSpec when stepping began: a changed setting starts a new tree
    nodes: list[Node] = field(default_factory=list)
    current: int | None = None
    last: dict[str, Any] = field(default_factory=dict)  # what the last step showed besides tokens (drafts, beams)

    def path(self, node: int | None = None) -> list[int]:
        """The node indices from the prompt to `node` (the current one by default)."""
        at = self.current if node is None else node
        chain: list[int] = []
        while at is not None:
            chain.append(at)
            at = self.nodes[at].parent
        return chain[::-1]

    def ids(self, node: int | None = None) -> list[int]:
        return [self.nodes[i].token for i in self.path(node)]

    def text(self, node: int | None = None) -> str:
        return "".join(self.nodes[i].text for i in self.path(node))

    def children(self, node: int | None) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.parent == node]

    def add(self, token: int, text: str, how: How, logprob: float | None, record: dict[str, Any] | None = None,
            parent: int | None = None, *, at_current: bool = True) -> int:
        """A child of the current node (or of `parent`), or the existing child with that token; it becomes
        current."""
        under = self.current if at_current else parent
        found = next((i for i in self.children(under) if self.nodes[i].token == token), None)
        if found is None:
            self.nodes.append(Node(token, text, under, how, logprob, record))
            found = len(self.nodes) - 1
        elif record is not None and self.nodes[found].record is None:
            self.nodes[found].record = record
        self.current = found
        return found

    def fork(self, token: int, text: str, logprob: float | None) -> int:
        """The candidate `token` at the current node's position: a sibling of the current node (the same
        distribution, so it keeps the same record)."""
        if self.current is None:
            raise ValueError("nothing stepped yet: there are no candidates to pick")
        node = self.nodes[self.current]
        return self.add(token, text, "picked", logprob, node.record, node.parent, at_current=False)

    def resume(self, node: int) -> None:
        if not 0 <= node < len(self.nodes):
            raise ValueError(f"node {node} is not in the tree (it has {len(self.nodes)} nodes)")
        self.current = node

    def leaves(self) -> list[int]:
        parents = {n.parent for n in self.nodes}
        return [i for i in range(len(self.nodes)) if i not in parents]

    def branches(self) -> list[Branch]:
        """Every branch, in the order their leaves were made: its text, where it forked, its log-probability."""
        listed = []
        for leaf in self.leaves():
            path = self.path(leaf)
            forked = [depth for depth, i in enumerate(path) if self.children(self.nodes[i].parent)[0] != i]
            scores = [self.nodes[i].logprob for i in path]
            listed.append(Branch(leaf, self.text(leaf), forked[-1] if forked else None,
                                 sum(s for s in scores if s is not None), sum(s is None for s in scores), len(path)))
        return listed

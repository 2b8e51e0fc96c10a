"""What one step of a column runs, and what its Result adds to the column's branch tree.

A step recomputes from the branch's tokens: the column's RunSpec with the path forced (`prefix_ids`) and as
many new tokens as the step asks. Forced tokens count as output for every stage that reads the output, so a
step equals the step of an uninterrupted run at that position (greedy token for token). A sampling column's
step keeps the column's seed, and each backend replays the draws of the forced tokens (JAX: the decode loop's key
splits; PyTorch: the global generator's draws), so the k-th Step draws what the uninterrupted run draws at token
k, and Step 8 and Run to the end are one run each. Assisted decoding with speculative sampling draws as many times
as a verify pass keeps drafts, which nothing replays: each of its tokens is a run of its own seeded with the seed
plus its position (stepping the same node again draws the same token). A beam search keeps several hypotheses,
so its step searches again from the prompt one token deeper and shows the beams.
"""

from __future__ import annotations

from typing import Any

from playground import registry
from playground.result import Result
from playground.spec import RunSpec
from playground.ui.step_tree import StepTree
from playground.ui.strategy_view import view_of


def searches_beams(spec: dict[str, Any]) -> bool:
    """Beam search and diverse beam search: a step is the beams, not one token to fork at."""
    return registry.strategy(spec["strategy"]).rows_knob is not None


def draws_each_token(spec: dict[str, Any]) -> bool:
    """A sampling column (not a beam search): each token of a Step or Step 8 is a run of its own."""
    return not searches_beams(spec) and registry.strategy(spec["strategy"]).samples(
        bool(spec.get("assisted_sampling")))


def replays_draws(spec: dict[str, Any]) -> bool:
    """The backends replay a forced prefix's draws for every sampling strategy but speculative sampling (the
    strategies with a draft source), whose draws per token depend on what was kept."""
    return "assisted_sampling" not in registry.strategy(spec["strategy"]).knobs


def seeded_each_token(spec: dict[str, Any]) -> bool:
    """A column whose every sampled token is a run of its own, seeded with the seed plus its position."""
    return draws_each_token(spec) and not replays_draws(spec)


def step_spec(tree: StepTree, count: int) -> RunSpec | str:
    """The run that advances the tree's current node by up to `count` tokens, or why it cannot."""
    spec = tree.spec
    most = int(spec["max_new_tokens"])
    if searches_beams(spec):
        depth = int(tree.last.get("depth", 0))
        if tree.last.get("ended") or depth >= most:
            return f"the search has ended ({depth} tokens; max_new_tokens is {most})"
        new = min(count, most - depth)
        return RunSpec.from_dict({**spec, **_sized(spec), "max_new_tokens": depth + new, "repeats": 1,
                                  "min_new_tokens": min(int(spec["min_new_tokens"]), depth + new)})
    if tree.current is not None and tree.nodes[tree.current].ended:
        return "the text ended here: pick another candidate, or resume another node"
    path = tree.ids()
    if len(path) >= most:
        return f"this branch has max_new_tokens ({most}) tokens"
    new = min(count, most - len(path))
    seed = int(spec["seed"]) + (len(path) if seeded_each_token(spec) else 0)
    return RunSpec.from_dict({**spec, **_sized(spec), "prefix_ids": path, "max_new_tokens": new, "seed": seed,
                              "repeats": 1, "min_new_tokens": min(int(spec["min_new_tokens"]), len(path) + new)})


def _sized(spec: dict[str, Any]) -> dict[str, int]:
    """On JAX, every step of the tree sized for the whole tree (the prompt and max_new_tokens after it), so that
    it runs on the programs of the tree's first step whatever its node, depth and count."""
    return {"sized_new_tokens": int(spec["max_new_tokens"])} if spec["backend"] == "jax" else {}


def absorb(tree: StepTree, result: Result, asked: int) -> None:
    """The step's tokens as drawn children of the current node (each with its record: the candidates at its
    position); an assisted step's drafts and a beam search's beams as what the step shows besides."""
    if searches_beams(tree.spec):
        tree.last = {"depth": result["new_tokens"], "ended": result["new_tokens"] < asked,
                     "beams": [[text, score] for text, score in zip(result["sequences"], result["scores"] or [],
                                                                    strict=False)]}
        return
    for record in result["tokens"]:
        tree.add(record["id"], record["text"], "drawn", record.get("logprob_model"), dict(record))
    tree.last = {"note": view_of(tree.spec["strategy"]).step_summary(result)}
    if result["new_tokens"] < asked and tree.current is not None:  # the model ended the text (end-of-text)
        tree.nodes[tree.current].ended = True

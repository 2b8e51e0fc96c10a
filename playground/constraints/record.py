"""A constrained run's record in the Result: the verdict on its output and what the mask cost."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from playground.constraints.matching import Replay
from playground.constraints.verdict import Verdict, judge


class ConstrainedSpec(Protocol):
    """What the record reads of a run's settings (a RunSpec has it): the constraint and the forced first tokens."""

    @property
    def constraint(self) -> str: ...
    @property
    def constraint_text(self) -> str: ...
    @property
    def prefix_ids(self) -> tuple[int, ...]: ...


class ConstrainedOutput(Protocol):
    """What the record reads of a backend's output (a GenerationOutput has it), so constraints import no backend."""

    @property
    def sequences(self) -> list[list[int]]: ...
    @property
    def constraint_replay(self) -> list[Replay] | None: ...
    @property
    def token_info(self) -> Sequence[Mapping[str, Any]] | None: ...
    @property
    def extra(self) -> dict[str, Any]: ...


class ConstraintRecord(Verdict):
    """A constrained run: the verdict on its first sequence, and what the mask cost."""

    sequences_valid: list[bool]  # per returned sequence (beam search returns several)
    changed_steps: int | None  # steps where the mask took out the model's most likely token (None: not recorded)
    mass_removed_mean: float | None  # mean probability mass the mask removed per step (None: not recorded)
    vocab_size: int | None  # tokens the mask chose from at each step (a step's allowed = this - its removed)


def constraint_record(spec: ConstrainedSpec, tokenizer: Any, output: ConstrainedOutput) -> ConstraintRecord | None:
    """A constrained run's verdict on its first sequence (valid, incomplete or invalid, and what judged it), each
    returned sequence's validity, and what the mask cost: the steps where it took out the model's most likely
    token, and the mean probability mass it removed per step."""
    if spec.constraint == "none" or output.constraint_replay is None:
        return None
    texts = [tokenizer.decode(list(spec.prefix_ids) + ids, skip_special_tokens=True) for ids in output.sequences]
    verdicts = [judge(spec.constraint, spec.constraint_text, text, engine.accepting, engine.refused_at)
                for text, engine in zip(texts, output.constraint_replay, strict=True)]
    info = output.token_info or []
    removed = [moved for known in info for name, _, moved in known.get("stages", []) if name == "constraint"]
    changed = sum(1 for known in info if (known.get("top_cut") or [None])[0] == "constraint")
    return {**verdicts[0], "sequences_valid": [v["valid"] for v in verdicts],
            "changed_steps": changed if info else None,
            "mass_removed_mean": round(sum(removed) / len(removed), 5) if removed else None,
            "vocab_size": output.extra.get("logits_width")}

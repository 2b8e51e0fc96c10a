"""A prompt scored token by token (echo's log-probabilities), through the runner's model cache, generation slot
and memory budget, so an API request that scores a prompt waits and counts like a page run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from playground import runner
from playground.generation_slot import API_OWNER, Holder
from playground.models import memory
from playground.models.loaded import LOADED
from playground.spec import RunSpec

FLOAT_BYTES = 4  # the logits are scored in fp32


@dataclass(frozen=True)
class ScoredPrompt:
    """The prompt as the model read it: every token (id, text) and, from the second one, its log-probability
    and the `top` most likely tokens at its position as (text, log-probability)."""

    ids: list[int]
    texts: list[str]
    logprobs: list[float | None]  # None for the first token: nothing predicts it
    top: list[list[tuple[str, float]] | None]


def score_prompt(prompt: str, spec: RunSpec, top: int, history: runner.History | None = None,
                 continuation: Sequence[int] = (), system: str = "") -> ScoredPrompt:
    """The prompt encoded as a run of `spec` encodes it (chat template and all), then `continuation` (token ids:
    a forced prefix and what a run generated), read by the run's model under the model's own softmax at
    temperature 1: a teacher-forced PyTorch forward with full attention, whichever backend and cache `spec`
    names."""
    from playground.backends.torch.prompt_logprobs import CHUNK, prompt_logprobs  # here: the page starts without torch

    runner.check_prompt(prompt)
    runner.preflight(spec)
    loaded, _ = LOADED.get(spec.model, runner.backend_for(spec.backend).source_weights(spec))
    prompt_ids = runner.encode_prompt(loaded, prompt, spec.chat, history, system)
    ids = runner.with_prefix(loaded, prompt_ids, tuple(continuation))
    vocab = loaded.model.config.get_text_config(decoder=True).vocab_size
    memory.check_fits("scoring the prompt", 2 * CHUNK * vocab * FLOAT_BYTES, LOADED.resident_bytes())
    with runner.GENERATION_LOCK.hold(Holder("an API request's prompt scoring", owner=API_OWNER)):
        scores = prompt_logprobs(loaded.model, ids, top)
    tokenizer = loaded.tokenizer
    id_list = [int(i) for i in ids]
    return ScoredPrompt(
        ids=id_list, texts=[tokenizer.decode([i]) for i in id_list], logprobs=[None, *scores.logprobs],
        top=[None, *([(tokenizer.decode([i]), lp) for i, lp in row] for row in scores.top)])

"""Strategy -> transformers GenerationConfig: the library's own processors do the work, we only choose them."""

from __future__ import annotations

import copy
from typing import Any

from transformers import GenerationConfig

from playground.spec import RunSpec


def generation_config(spec: RunSpec, model: Any) -> GenerationConfig:
    """A GenerationConfig for `spec`, starting from the model's own (it carries eos/pad ids)."""
    config = copy.deepcopy(model.generation_config)
    # unset every knob first: the model's defaults (e.g. a shipped temperature) must not leak into a run
    config.update(do_sample=False, num_beams=1, temperature=None, top_k=None, top_p=None, min_p=None,
                  repetition_penalty=None, num_return_sequences=1, length_penalty=None, early_stopping=None)
    config.return_dict_in_generate = True  # we read scores and sequences from the output object
    config.max_new_tokens = spec.max_new_tokens
    config.max_length = None
    config.min_new_tokens = spec.min_new_tokens or None
    if spec.repetition_penalty != 1.0:
        config.repetition_penalty = spec.repetition_penalty
    if config.pad_token_id is None:
        config.pad_token_id = _first(config.eos_token_id)
    if spec.strategy == "sampling":
        config.update(do_sample=True, temperature=spec.temperature, top_k=spec.top_k or None,
                      top_p=spec.top_p if spec.top_p < 1.0 else None, min_p=spec.min_p or None)
    elif spec.strategy == "beam":
        config.update(num_beams=spec.num_beams, length_penalty=spec.length_penalty,
                      early_stopping=spec.early_stopping, num_return_sequences=spec.num_return_sequences,
                      output_scores=True)
    elif spec.strategy == "assisted" and spec.prompt_lookup:
        config.prompt_lookup_num_tokens = spec.prompt_lookup
    config.validate(strict=True)
    return config


def assistant_kwargs(spec: RunSpec, main_tokenizer: Any) -> dict[str, Any]:
    """generate() kwargs for a draft model: plain speculative decoding when the draft shares the main model's
    vocabulary, universal assisted decoding (text re-tokenized between the two) when it does not."""
    if spec.strategy != "assisted" or spec.assistant is None:
        return {}
    from playground.models import catalog

    draft, _ = catalog.LOADED.get(spec.assistant, "fp32")
    kwargs: dict[str, Any] = {"assistant_model": draft.model}
    if not same_vocabulary(main_tokenizer, draft.tokenizer):
        kwargs.update(tokenizer=main_tokenizer, assistant_tokenizer=draft.tokenizer)
    return kwargs


def same_vocabulary(a: Any, b: Any) -> bool:
    return a is b or (len(a) == len(b) and a.get_vocab() == b.get_vocab())


def _first(ids: Any) -> int | None:
    if isinstance(ids, (list, tuple)):
        return ids[0] if ids else None
    return ids

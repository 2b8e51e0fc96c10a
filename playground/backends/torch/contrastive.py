"""Contrastive search (Su et al., 2022) as our own decoding loop, for `model.generate(custom_generate=...)`.

transformers 5 moved contrastive search out of its core to a Hub repository that generate() would fetch and run
as remote code, which the project never allows. This is a port of transformers 4.52.4's
`GenerationMixin._contrastive_search` and `_ranking_fast` (the batched path, not `low_memory`; decoder-only
models; a DynamicCache), step for step, so that it gives 4.52's tokens exactly (tests/references/
guide_methods.json). generate() still prepares the inputs, the cache, the logits processors and the stopping
criteria, and passes `penalty_alpha` / `top_k` in the generation config: with a callable it refuses nothing.

generate() hands a callable no streamer, so new tokens stream through `emit`; `record` collects, per token, the
k candidates with their probability, degeneration penalty and contrastive score, for the page to show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList
from transformers.cache_utils import DynamicCache
from transformers.generation.utils import GenerateDecoderOnlyOutput

from playground.backends.base import EmitTokens
from playground.backends.torch import config as settings
from playground.backends.torch.strategy import OwnLoop
from playground.backends.torch.transformers_hooks import expand_inputs, pad_token, prefill, update_model_kwargs
from playground.spec import RunSpec


@dataclass(frozen=True)
class ContrastiveStep:
    """One generated token of one row: the k candidates, most probable first, and how they were weighed.
    `probs` is the distribution after the logits processors (the model's own when there are none), as 4.52 used."""

    row: int
    candidates: list[int]
    probs: list[float]
    penalties: list[float]  # max cosine similarity with the context's hidden states
    scores: list[float]  # (1 - alpha) * prob - alpha * penalty
    chosen: int  # index into `candidates` of the highest score

    def token_info(self) -> dict[str, Any]:
        """What the token's record keeps of the step (backends.base.TokenInfo's `candidates`)."""
        return {"candidates": [(token, p, penalty, score) for token, p, penalty, score
                               in zip(self.candidates, self.probs, self.penalties, self.scores, strict=True)]}


def contrastive_search(model: Any, input_ids: torch.Tensor, logits_processor: LogitsProcessorList,
                       stopping_criteria: StoppingCriteriaList, generation_config: GenerationConfig,
                       synced_gpus: bool = False, *, emit: EmitTokens | None = None,
                       record: list[ContrastiveStep] | None = None,
                       **model_kwargs: Any) -> GenerateDecoderOnlyOutput | torch.Tensor:
    """The decoding loop generate() calls with `_sample`'s arguments. Each step: top-k of the next-token
    distribution, one batched forward over the k candidates (the cache repeated k times), the candidate whose
    hidden state is least like the context's wins on (1 - alpha) * p - alpha * penalty, its cache row is kept
    and its logits give the next step's candidates."""
    alpha, k = _knobs(generation_config)
    if synced_gpus or model.config.is_encoder_decoder:
        raise NotImplementedError("contrastive search here is for decoder-only models on one device")
    batch = input_ids.shape[0]
    mask = model_kwargs.get("attention_mask")  # None when generate() dropped an all-ones mask
    cosine_mask = (mask if mask is not None else torch.ones_like(input_ids)).repeat_interleave(k, dim=0)
    context, logits, model_kwargs = _prefill(model, input_ids, k, generation_config, model_kwargs)
    cache: DynamicCache = model_kwargs["past_key_values"]
    pad = pad_token(generation_config)
    has_eos = any(hasattr(criteria, "eos_token_id") for criteria in stopping_criteria)
    keep = generation_config.return_dict_in_generate
    scores: tuple[torch.Tensor, ...] | None = () if keep and generation_config.output_scores else None
    raw: tuple[torch.Tensor, ...] | None = () if keep and generation_config.output_logits else None
    unfinished = torch.ones(batch, dtype=torch.long, device=input_ids.device)
    while True:
        processed = logits_processor(cast(torch.LongTensor, input_ids), logits)
        top_probs, top_ids = torch.topk(torch.softmax(processed, dim=-1), dim=-1, k=k)
        scores = scores + (processed,) if scores is not None else None
        raw = raw + (logits,) if raw is not None else None
        cache.batch_repeat_interleave(k)
        inputs = model.prepare_inputs_for_generation(top_ids.view(-1, 1), **model_kwargs)
        outputs = model(**inputs, return_dict=True, output_hidden_states=True)
        next_hidden = outputs.hidden_states[-1]  # (B*k, 1, H), after the final norm as in 4.52
        penalty, score = _rank(context.repeat_interleave(k, dim=0), next_hidden, top_probs, cosine_mask, alpha, k)
        selected = score.max(dim=-1)[1].cpu()
        cosine_mask = torch.cat([cosine_mask, cosine_mask.new_ones((cosine_mask.shape[0], 1))], dim=-1)
        rows = torch.arange(batch)
        next_tokens = top_ids[rows, selected]
        chosen_hidden = next_hidden.squeeze(1).view(batch, k, -1)[rows, selected]
        context = torch.cat([context, chosen_hidden.unsqueeze(1)], dim=1)
        cache.batch_select_indices(rows * k + selected)  # the chosen candidate's row, its token already cached
        logits = outputs.logits[:, -1, :].float().view(batch, k, -1)[rows, selected].to(input_ids.device)
        model_kwargs = update_model_kwargs(model, outputs, model_kwargs)
        if has_eos and pad is not None:  # finished rows get the pad token
            next_tokens = next_tokens * unfinished + pad * (1 - unfinished)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        if emit is not None:
            emit(next_tokens.tolist())
        if record is not None:
            record.extend(_steps(top_ids, top_probs, penalty.view(batch, k), score, selected))
        unfinished = unfinished & ~stopping_criteria(input_ids, scores)
        if unfinished.max() == 0:
            break
    # the loop looks one token ahead: the last chosen token is cached but has no next step, so drop it as 4.52 did
    # (4.52 cropped only with return_dict_in_generate; we always do, so a passed-in cache is left consistent)
    cache.crop(-1)
    if not keep:
        return input_ids
    # transformers types these as LongTensor and one-element tuples; they are the usual tensors and per-step tuples
    return GenerateDecoderOnlyOutput(sequences=cast(torch.LongTensor, input_ids), scores=cast(Any, scores),
                                     logits=cast(Any, raw), past_key_values=cache)


def _knobs(config: GenerationConfig) -> tuple[float, int]:
    """penalty_alpha and top_k, which generate() leaves in the config for a callable to read."""
    alpha, k = config.penalty_alpha, config.top_k
    if alpha is None or k is None or k < 1:
        raise ValueError(f"contrastive search needs penalty_alpha and top_k >= 1, got {alpha} and {k}")
    return float(alpha), int(k)


def _prefill(model: Any, input_ids: torch.Tensor, k: int, generation_config: GenerationConfig,
             model_kwargs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """The prompt's forward: its last hidden states (the first context), the logits for the first candidates,
    and the model kwargs grown by one position and repeated k times (the rows of the candidates' forward).

    generate()'s own prefill runs it, in chunks where the run asks for them (prefill.py: the dynamic cache keeps
    every position in full precision, so chunks give the whole prompt's bits); each chunk's forward hands its last
    hidden states to the context, which needs every prompt position."""
    cache = model_kwargs.get("past_key_values")
    if cache is not None and (not isinstance(cache, DynamicCache) or cache.get_seq_length() > 0):
        raise ValueError("contrastive search needs an empty DynamicCache (it repeats and selects batch rows)")
    if getattr(model.config, "tie_last_hidden_states", None) is False:  # hidden_states[-1] would miss the norm
        raise ValueError("contrastive search needs hidden_states[-1] to be the final-norm output, as in 4.52")
    model_kwargs["use_cache"] = True
    chunks: list[torch.Tensor] = []
    hook = model.register_forward_hook(lambda _module, _args, out: chunks.append(out.hidden_states[-1]))
    try:
        outputs = prefill(model, input_ids, generation_config, {**model_kwargs, "output_hidden_states": True})
    finally:
        hook.remove()
    model_kwargs["past_key_values"] = outputs.past_key_values
    if not isinstance(outputs.past_key_values, DynamicCache):
        raise ValueError(f"contrastive search needs a DynamicCache, the model made {type(outputs.past_key_values)}")
    context = torch.cat(chunks, dim=1)  # (B, prompt, H)
    logits = outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32, device=input_ids.device)
    model_kwargs = update_model_kwargs(model, outputs, model_kwargs)
    _, model_kwargs = expand_inputs(model, k, input_ids, model_kwargs)
    return context, logits, model_kwargs


def _rank(context: torch.Tensor, candidates: torch.Tensor, probs: torch.Tensor, cosine_mask: torch.Tensor,
          alpha: float, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """4.52's `_ranking_fast`, operation for operation (a tie or a last-bit difference would change the token),
    returning the degeneration penalties (B*k,) and the contrastive scores (B, k) instead of only the winner."""
    norm_context = context / context.norm(dim=2, keepdim=True)
    norm_candidates = candidates / candidates.norm(dim=2, keepdim=True)
    cosine = torch.matmul(norm_context, norm_candidates.transpose(1, 2)).squeeze(-1)  # (B*k, S)
    mask = cosine_mask.to(dtype=cosine.dtype)
    cosine = cosine + (1 - mask) * torch.finfo(cosine.dtype).min  # padding never counts as similar
    penalty = torch.max(cosine, dim=-1)[0]
    score = (1.0 - alpha) * probs.view(-1) - alpha * penalty
    return penalty, torch.stack(torch.split(score, k))


def _steps(ids: torch.Tensor, probs: torch.Tensor, penalties: torch.Tensor, scores: torch.Tensor,
           selected: torch.Tensor) -> list[ContrastiveStep]:
    """One record per row of this step."""
    return [ContrastiveStep(row, ids[row].tolist(), probs[row].tolist(), penalties[row].tolist(),
                            scores[row].tolist(), int(selected[row])) for row in range(ids.shape[0])]


def plug_in(spec: RunSpec) -> OwnLoop:
    """The strategy's plug-in: this loop, recording each token's candidates."""
    return OwnLoop(spec, contrastive_search, settings.contrastive)

"""DoLa, decoding by contrasting layers (Chuang et al., 2023), our own loop for `model.generate(custom_generate=...)`.

transformers 5 moved DoLa to a Hub repository that generate() would fetch and run as remote code, which the
project never allows. This ports transformers 4.52.4's `GenerationMixin._dola_decoding`, `_dola_select_contrast`
and `_relative_top_filter` (decoder-only models, greedy or sampling, batch kept as (B, ...)) so that it gives 4.52's
tokens exactly (tests/references/guide_methods.json). generate() prepares the inputs, the cache, the logits
processors and the stopping criteria and leaves `dola_layers` in the generation config: a callable is refused nothing.

Each step the final layer's logits are contrasted with one early ("premature") layer's: log p_final - log p_layer
over the tokens whose final probability is at least a tenth of the top one (the rest get -inf); the logits
processors (repetition penalty first, then the sampling warpers, as in 4.52) act on that difference, then argmax or
sampling. With several candidate layers, the one whose distribution is furthest from the final one's (Jensen-Shannon)
is used. transformers 5's `hidden_states` hold what 4.52's did: [0] the embeddings, [i] the raw output of layer i-1,
[N] the final norm's output; candidates are < N, so `lm_head` gets the same tensors as in 4.52.

4.52 behaviours matched on purpose (docs/guide-references.md, "4.52's behaviour", DoLa):
- Looks like a bug: the candidate layers' logits skip the final norm, the final layer's get it, so a normalized
  distribution is contrasted with ones whose sharpness follows the residual stream's scale. The authors' code did the
  same (github.com/voidism/DoLa issue 9, open). `norm_premature=True` puts the candidates through the model's final
  norm first; the default False is 4.52's and the only setting the references cover.
- Looks like a bug: the layer is chosen once per step for the whole batch, from the JS divergences averaged over the
  rows, so one row's choice depends on the others. No switch: with one row (every reference) the two agree, and a
  per-row choice is had by running the rows one at a time. `DolaStep.js` keeps each row's own divergences.
- Quirks: a tied 4-layer model gets `[2]` for both `low` and `high` (5 layers: `[2]` and `[2, 4]`); untied models
  start at layer 0, the embeddings put through `lm_head`; over 40 layers the first/last 20 are used; a list keeps
  indices < N. Not 4.52: a negative index, a list with none left, or a half with no layer in it is refused (4.52
  indexed from the end or crashed).
- Refused, not matched: num_return_sequences > 1. 4.52 silently returned one sequence per prompt under DoLa; the
  generate() here has already repeated each prompt, and its n rows would draw other samples than 4.52's one.
Checked beside 4.52 directly, not in the tests: single-row greedy and seeded sampling give bit-equal scores and
tokens. Left-padded batches give 4.52's tokens; their scores differ as plain greedy's do, outside this loop (~1e-7
in the model's forward; transformers 5's repetition penalty skips the left padding, 4.52 penalized the pad id).
`record` gets, per token and row, the candidates' JS divergences, the layer used, and the final layer's own argmax.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput

from playground.backends.base import EmitTokens
from playground.backends.dola_layers import CONTRAST_STAGE, candidate_layers
from playground.backends.torch import config as settings
from playground.backends.torch.strategy import Call, OwnLoop
from playground.backends.torch.transformers_hooks import is_stateful, pad_token, prefill, update_model_kwargs
from playground.spec import RunSpec

RELATIVE_TOP = 0.1  # 4.52's `_relative_top_filter` default: keep tokens with p_final >= RELATIVE_TOP * max p_final
BASE_FILTER_VALUE = -1e-3  # what the premature layer's log-probability is set to where the final one was cut


@dataclass(frozen=True)
class DolaStep:
    """One generated token of one row: what the contrast saw and whether it changed the final layer's choice."""

    row: int
    layers: list[int]  # the candidate premature layers
    js: list[float]  # per candidate, this row's Jensen-Shannon divergence from the final layer (4.52 ranks the mean)
    premature: int  # the layer contrasted at this step (the same for every row)
    final_top: int  # argmax of the final layer's own logits, before the contrast and any logits processor
    token: int
    changed: bool  # token != final_top

    def token_info(self) -> dict[str, Any]:
        """What the token's record keeps of the step (backends.base.TokenInfo's `dola`)."""
        return {"dola": {"layer": self.premature, "layers": self.layers, "js": self.js, "final_top": self.final_top}}


def dola_decoding(model: Any, input_ids: torch.Tensor, logits_processor: LogitsProcessorList,
                  stopping_criteria: StoppingCriteriaList, generation_config: GenerationConfig,
                  synced_gpus: bool = False, *, emit: EmitTokens | None = None, record: list[DolaStep] | None = None,
                  contrasted: Callable[[str, torch.Tensor], None] | None = None, norm_premature: bool = False,
                  **model_kwargs: Any) -> GenerateDecoderOnlyOutput | torch.Tensor:
    """The decoding loop generate() calls with `_sample`'s arguments: one forward per token with every hidden state,
    the candidates' logits from `lm_head`, the contrast, the logits processors, then argmax (or sampling).
    `contrasted(CONTRAST_STAGE, final logits)` is told before the processors see each step's contrast: the token
    probe then takes the final layer's logits as the model's own and the contrast as a stage ahead of the chain."""
    layers = candidate_layers(model, generation_config.dola_layers)
    lm_head = _refuse_what_4_52_did_not_run(model, generation_config, synced_gpus)
    norm = _final_norm(model) if norm_premature else None
    keep = generation_config.return_dict_in_generate
    scores: tuple[torch.Tensor, ...] | None = () if keep and generation_config.output_scores else None
    raw: tuple[torch.Tensor, ...] | None = () if keep and generation_config.output_logits else None
    attentions: tuple[Any, ...] | None = () if keep and generation_config.output_attentions else None
    hiddens: tuple[Any, ...] | None = () if keep and generation_config.output_hidden_states else None
    pad = pad_token(generation_config)
    has_eos = any(hasattr(criteria, "eos_token_id") for criteria in stopping_criteria)
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
    model_kwargs["output_hidden_states"] = True  # prepare_inputs_for_generation forwards it to every forward
    if attentions is not None:
        model_kwargs["output_attentions"] = True
    outputs = prefill(model, input_ids, generation_config, model_kwargs)  # slices a restarted cache, chunks if asked
    while True:
        model_kwargs = update_model_kwargs(model, outputs, model_kwargs)
        final = outputs.logits[:, -1, :].float()
        premature = {i: _head(lm_head, norm, outputs.hidden_states[i][:, -1, :]).to(final.device) for i in layers}
        js = _js_divergences(premature, layers, final) if len(layers) > 1 or record is not None else None
        chosen = layers[int(js.mean(-1).argmax().item())] if js is not None and len(layers) > 1 else layers[0]
        contrast = _contrast(final, premature[chosen]).to(input_ids.device)
        if contrasted is not None:
            contrasted(CONTRAST_STAGE, final)
        processed = logits_processor(cast(torch.LongTensor, input_ids), contrast)
        scores = scores + (processed,) if scores is not None else None
        raw = raw + (final.to(copy=True),) if raw is not None else None
        attentions = attentions + (outputs.attentions,) if attentions is not None else None
        hiddens = hiddens + (outputs.hidden_states,) if hiddens is not None else None
        next_tokens = _pick(processed, bool(generation_config.do_sample))
        if has_eos and pad is not None:  # finished rows get the pad token
            next_tokens = next_tokens * unfinished + pad * (1 - unfinished)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        if emit is not None:
            emit(next_tokens.tolist())
        if record is not None and js is not None:
            record.extend(_steps(layers, js, chosen, final, next_tokens))
        unfinished = unfinished & ~stopping_criteria(input_ids, scores)
        if unfinished.max() == 0:
            break
        step = 1 if model_kwargs.get("use_cache", True) else None  # without a cache: the whole sequence again
        inputs = model.prepare_inputs_for_generation(input_ids, next_sequence_length=step, **model_kwargs)
        outputs = model(**inputs, return_dict=True)
    if not keep:
        return input_ids
    # transformers types these as LongTensor and one-element tuples; they are the usual tensors and per-step tuples
    return GenerateDecoderOnlyOutput(sequences=cast(torch.LongTensor, input_ids), scores=cast(Any, scores),
                                     logits=cast(Any, raw), attentions=cast(Any, attentions),
                                     hidden_states=cast(Any, hiddens),
                                     past_key_values=model_kwargs.get("past_key_values"))


def _refuse_what_4_52_did_not_run(model: Any, config: GenerationConfig, synced_gpus: bool) -> torch.nn.Module:
    """What this loop cannot give 4.52's result for is refused with the reason; returns the model's lm_head."""
    if synced_gpus or model.config.is_encoder_decoder or is_stateful(model):
        raise NotImplementedError("DoLa here is for decoder-only, non-stateful models on one device")
    if config.num_beams not in (None, 1):  # 4.52 ran plain beam search then, DoLa ignored
        raise ValueError("DoLa runs greedy or sampling only, not with num_beams > 1")
    if config.num_return_sequences not in (None, 1):  # see the module docstring
        raise ValueError("DoLa here gives one sequence per prompt: 4.52 ignored num_return_sequences under DoLa")
    lm_head = model.get_output_embeddings()
    if lm_head is None:
        raise ValueError("DoLa needs the model's output embeddings (lm_head)")
    return lm_head


def _pick(scores: torch.Tensor, sample: bool) -> torch.Tensor:
    """The next token of each row from the processed scores: drawn from their softmax, or their argmax."""
    if sample:
        return torch.multinomial(F.softmax(scores, dim=-1), num_samples=1).squeeze(1)
    return torch.argmax(scores, dim=-1)


def _final_norm(model: Any) -> torch.nn.Module:
    """The decoder's final norm, for `norm_premature=True` (Llama-like models name it `norm`)."""
    norm = getattr(model.get_decoder(), "norm", None)
    if not isinstance(norm, torch.nn.Module):
        raise ValueError(f"norm_premature needs the decoder's final norm, {type(model).__name__} has no `.norm`")
    return norm


def _head(lm_head: torch.nn.Module, norm: torch.nn.Module | None, hidden: torch.Tensor) -> torch.Tensor:
    """A candidate layer's logits: `lm_head` on its raw hidden state as 4.52 did (model dtype), or on it normed."""
    return lm_head(hidden if norm is None else norm(hidden))


def _js_divergences(premature: dict[int, torch.Tensor], layers: list[int], final: torch.Tensor) -> torch.Tensor:
    """(L, B): each candidate's JS divergence from the final layer, KL terms averaged over the vocabulary, as 4.52."""
    stacked = torch.stack([premature[i] for i in layers], dim=0)
    average = 0.5 * (F.softmax(final, dim=-1)[None, :, :] + F.softmax(stacked, dim=-1))
    kl_final = F.kl_div(F.log_softmax(final, dim=-1)[None, :, :], average, reduction="none").mean(-1)
    kl_layers = F.kl_div(F.log_softmax(stacked, dim=-1), average, reduction="none").mean(-1)
    return 0.5 * (kl_final + kl_layers)


def _contrast(final: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """4.52's `_relative_top_filter` and the difference: log p_final - log p_base over the tokens within
    log(RELATIVE_TOP) of the final top (the top always kept); -inf elsewhere, where base is set to -1e-3 first."""
    final_logp = final.log_softmax(dim=-1)
    base_logp = base.log_softmax(dim=-1)
    top = torch.max(final_logp, dim=-1).values  # 4.52's sorted[..., min_tokens_to_keep - 1] with 1 token: the max
    threshold = torch.min(top, top + math.log(RELATIVE_TOP)).unsqueeze(-1)
    cut = final_logp < threshold
    base_logp[cut] = BASE_FILTER_VALUE
    final_logp[cut] = -float("inf")
    return final_logp - base_logp


def _steps(layers: list[int], js: torch.Tensor, chosen: int, final: torch.Tensor,
           tokens: torch.Tensor) -> list[DolaStep]:
    """One record per row of this step."""
    tops = final.argmax(dim=-1).tolist()
    return [DolaStep(row, list(layers), js[:, row].tolist(), chosen, tops[row], token, token != tops[row])
            for row, token in enumerate(tokens.tolist())]


class DolaLoop(OwnLoop):
    """This loop as `custom_generate`, telling the token probe (when there is one) of each step's contrast."""

    def generate_kwargs(self, call: Call) -> dict[str, Any]:
        kwargs = super().generate_kwargs(call)
        if call.probe is not None:
            kwargs["contrasted"] = call.probe.before_chain
        return kwargs


def plug_in(spec: RunSpec) -> OwnLoop:
    """The strategy's plug-in: this loop, recording each token's layer choice and contrast."""
    return DolaLoop(spec, dola_decoding, settings.dola)

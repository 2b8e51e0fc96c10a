"""Diverse (group) beam search (Vijayakumar et al., 2016) as our own loop, for `model.generate(custom_generate=...)`.

transformers 5 moved group beam search, with its `BeamSearchScorer` and `HammingDiversityLogitsProcessor`, to a Hub
repository that generate() would run as remote code, which the project never allows. This ports 4.52.4's
`_group_beam_search`, the scorer's `process` / `finalize`, `BeamHypotheses` and the Hamming processor (decoder-only,
batch 1; any cache, where 4.52 used a DynamicCache) step for step, so that it gives 4.52's sequences and
`sequences_scores` (tests/references/guide_methods.json). generate() still expands the prompt to `num_beams`
rows and prepares the cache, processors and stopping criteria; `num_beam_groups` and `diversity_penalty` wait in
the generation config.

4.52 behaviours matched on purpose (docs/guide-references.md). Quirks, kept: a hypothesis's length counts its eos;
all groups' hypotheses are pooled and returned best score first, not by group. A bug, behind a switch: the Hamming
penalty stays in the beam's running score, so a returned score is the log-probability minus every penalty the beam
paid, over the length, and the final ranking uses that. `penalty_in_score=False` adds the paid penalties back when a
hypothesis is stored, so hypotheses are kept, ranked and returned by their own log-probability (the penalty still
steers the search). `beam_indices` is not returned: 4.52's group variant mixed up the groups' histories.
`record` collects, per step and per beam, its group, token, running score and the diversity penalty it paid.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, StoppingCriteriaList
from transformers.cache_utils import Cache
from transformers.generation.logits_process import (
    SequenceBiasLogitsProcessor,
    UnbatchedClassifierFreeGuidanceLogitsProcessor,
)
from transformers.generation.utils import GenerateBeamDecoderOnlyOutput

from playground.backends.group_tree import DiverseBeamStep, group_tree
from playground.backends.torch import config as settings
from playground.backends.torch.strategy import Call, OwnLoop, Recorded
from playground.backends.torch.transformers_hooks import eos_tokens, pad_token, prefill, update_model_kwargs
from playground.spec import RunSpec


class HammingDiversity(LogitsProcessor):
    """4.52's HammingDiversityLogitsProcessor (batch 1): a group's log-probabilities lose `penalty` times the
    number of earlier groups that picked each token at this step. Group 0 is left as it is."""

    def __init__(self, penalty: float, group_size: int) -> None:
        self.penalty, self.group_size = penalty, group_size

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, current_tokens: torch.Tensor,
                 beam_group_idx: int) -> torch.FloatTensor:
        start = beam_group_idx * self.group_size
        if start == 0:
            return scores
        frequency = torch.bincount(current_tokens[:start], minlength=scores.shape[-1]).to(scores.device)
        return cast(torch.FloatTensor, scores - self.penalty * frequency)


class _Hypotheses:
    """4.52's BeamHypotheses: the `size` best finished hypotheses of one group, as (score, ids) pairs."""

    def __init__(self, size: int, length_penalty: float, early_stopping: bool | str, max_new: int | None) -> None:
        if not isinstance(early_stopping, bool) and max_new is None:
            raise ValueError("early_stopping='never' needs a max_length")
        self.size, self.length_penalty, self.early_stopping = size, length_penalty, early_stopping
        self.max_new, self.worst, self.beams = max_new, 1e9, cast(list[tuple[float, torch.Tensor]], [])

    def add(self, ids: torch.Tensor, sum_logprobs: float, generated_len: int) -> None:
        score = sum_logprobs / (generated_len ** self.length_penalty)
        if len(self.beams) < self.size or score > self.worst:
            self.beams.append((score, ids))
            if len(self.beams) > self.size:
                ranked = sorted((s, i) for i, (s, _) in enumerate(self.beams))
                del self.beams[ranked[0][1]]
                self.worst = ranked[1][0]
            else:
                self.worst = min(score, self.worst)

    def is_done(self, best_sum_logprobs: float, generated_len: int) -> bool:
        """Full, and (early_stopping False) no running beam at this length beats the worst kept one; "never" with
        a positive length penalty assumes the longest length instead."""
        if len(self.beams) < self.size:
            return False
        if self.early_stopping is True:
            return True
        if self.early_stopping is not False and self.length_penalty > 0.0 and self.max_new is not None:
            generated_len = self.max_new
        return self.worst >= best_sum_logprobs / generated_len ** self.length_penalty


class _Groups:
    """4.52's scorer state and more: per group its hypotheses and whether it is done; per beam row its running
    score (penalties in, as 4.52 keeps it) and the penalties it paid (for the record and penalty_in_score=False)."""

    def __init__(self, config: GenerationConfig, size: int, penalty: float, max_new: int | None,
                 penalty_in_score: bool, device: torch.device) -> None:
        groups, eos, pad = config.num_beam_groups or 1, eos_tokens(config), pad_token(config)
        early = False if config.early_stopping is None else config.early_stopping
        self.size, self.penalty, self.penalty_in_score = size, penalty, penalty_in_score
        self.eos, self.pad = (set() if eos is None else set(eos.view(-1).tolist())), pad
        self.eos_first = None if eos is None else int(eos.view(-1)[0])
        self.hyps = [_Hypotheses(size, float(config.length_penalty), early, max_new) for _ in range(groups)]
        self.done = [False] * groups
        self.scores = torch.full((groups, size), -1e9, dtype=torch.float, device=device)
        self.scores[:, 0] = 0  # one live beam per group at first, else a group's beams would all pick one token
        self.scores = self.scores.view(-1)
        self.paid = torch.zeros(groups * size, dtype=torch.float64)

    def advance(self, group: int, group_ids: torch.Tensor, processed: torch.Tensor, current: torch.Tensor, step: int,
                record: list[DiverseBeamStep] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One group's step from its processed log-probabilities: its next tokens and parents (within the group)."""
        start, vocab = group * self.size, processed.shape[-1]
        rows = list(range(start, start + self.size))
        if self.done[group]:  # 4.52: a finished group runs on pad, score 0, every row the first beam's history
            if self.pad is None:
                raise ValueError("a finished group needs pad_token_id to run on")
            self.scores[rows] = 0
            return torch.full((self.size,), int(self.pad)), torch.zeros(self.size, dtype=torch.long)
        totals = (processed + self.scores[rows].unsqueeze(-1)).view(1, self.size * vocab)
        top_scores, top_ids = torch.topk(totals, max(2, 1 + len(self.eos)) * self.size, dim=1)
        taken = torch.bincount(current[:start].cpu(), minlength=vocab).double() * self.penalty  # paid per token
        next_scores, tokens, parents = self._process(group, group_ids, top_scores[0], top_ids[0], taken, step, record)
        self.done[group] = self.hyps[group].is_done(top_scores[0].max().item(), step + 1)
        self.scores[rows] = next_scores.to(self.scores)
        self.paid[rows] = self.paid[start + parents] + taken[tokens]
        if record is not None:
            record.extend(DiverseBeamStep(step, group, row, start + int(parent), int(token), float(score),
                                          float(taken[int(token)]), float(self.paid[row]))
                          for row, parent, token, score in zip(rows, parents, tokens, next_scores, strict=True))
        return tokens, parents

    def _process(self, group: int, group_ids: torch.Tensor, scores: torch.Tensor, ids: torch.Tensor,
                 taken: torch.Tensor, step: int,
                 record: list[DiverseBeamStep] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """4.52's BeamSearchScorer.process for one group: best first, an eos among the top `size` candidates
        becomes a finished hypothesis (its length counts the eos), other tokens continue beams until `size` do."""
        start, vocab, beam = group * self.size, taken.shape[0], 0
        next_scores, tokens, parents = torch.zeros(self.size), *torch.zeros((2, self.size), dtype=torch.long)
        for rank, (score, index) in enumerate(zip(scores.tolist(), ids.tolist(), strict=True)):
            parent, token = divmod(index, vocab)
            if token in self.eos:
                if rank >= self.size:
                    continue
                paid = float(self.paid[start + parent] + taken[token])
                self.hyps[group].add(group_ids[parent].clone(), score + (0.0 if self.penalty_in_score else paid),
                                     step + 1)
                if record is not None:
                    record.append(DiverseBeamStep(step, group, -1, start + parent, token, score, float(taken[token]),
                                                  paid, True))
            else:
                next_scores[beam], tokens[beam], parents[beam] = score, token, parent
                beam += 1
            if beam == self.size:
                break
        if beam < self.size:
            raise ValueError(f"at most {self.size} of the candidates {ids.tolist()} may be eos")
        return next_scores, tokens, parents

    def finalize(self, input_ids: torch.Tensor, prompt_len: int, count: int,
                 max_length: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """4.52's finalize: the running beams of the groups not done join their group's hypotheses, all groups'
        are pooled and the `count` best returned, best first; shorter rows get an eos, then pad."""
        final = self.scores.tolist() if self.penalty_in_score else (self.scores.double().cpu() + self.paid).tolist()
        for group in (g for g, done in enumerate(self.done) if not done):
            for row in range(group * self.size, (group + 1) * self.size):
                self.hyps[group].add(input_ids[row], final[row], input_ids.shape[1] - prompt_len)
        pooled = sorted((h for group in self.hyps for h in group.beams), key=lambda h: h[0])
        best = [pooled.pop() for _ in range(count)]
        lengths = [len(ids) for _, ids in best]
        width = max(lengths) + 1 if max_length is None else min(max(lengths) + 1, max_length)
        if len(set(lengths)) > 1 and self.pad is None:
            raise ValueError("returning sequences of different lengths needs pad_token_id")
        sequences = input_ids.new_full((count, width), 0 if self.pad is None else int(self.pad))
        for row, ((_, ids), length) in enumerate(zip(best, lengths, strict=True)):
            sequences[row, :length] = ids
            if length < width and self.eos_first is not None:
                sequences[row, length] = self.eos_first
        return sequences, torch.tensor([s for s, _ in best], dtype=torch.float32, device=input_ids.device)


def diverse_beam_search(model: Any, input_ids: torch.Tensor, logits_processor: LogitsProcessorList,
                        stopping_criteria: StoppingCriteriaList, generation_config: GenerationConfig,
                        synced_gpus: bool = False, *, penalty_in_score: bool = True,
                        record: list[DiverseBeamStep] | None = None,
                        **model_kwargs: Any) -> GenerateBeamDecoderOnlyOutput | torch.Tensor:
    """The decoding loop generate() calls with `_sample`'s arguments. Each step runs one forward over all beams;
    then, group by group, the group's log-softmax less the Hamming penalty (for the tokens the earlier groups just
    chose) is added to its running scores, its 2 * group_size best continuations go through 4.52's `process`, and
    its rows are reordered; the cache rows follow once per step. Nothing streams: beams change until the end."""
    cfg = generation_config
    num_beams, num_groups, penalty = _knobs(cfg, model, synced_gpus, input_ids.shape[0])
    size = num_beams // num_groups
    processors = _with_hamming(logits_processor, HammingDiversity(penalty, size))
    prompt_len, max_length = input_ids.shape[1], stopping_criteria.max_length
    state = _Groups(cfg, size, penalty, None if max_length is None else max_length - prompt_len, penalty_in_score,
                    input_ids.device)
    keep = cfg.return_dict_in_generate
    scores: tuple[torch.Tensor, ...] | None = () if keep and cfg.output_scores else None
    raw: tuple[torch.Tensor, ...] | None = () if keep and cfg.output_logits else None
    outputs, cache = _prefill(model, input_ids, cfg, model_kwargs)
    while True:
        model_kwargs = update_model_kwargs(model, outputs, model_kwargs)
        current = torch.zeros(num_beams, dtype=input_ids.dtype, device=input_ids.device)
        reorder = torch.zeros(num_beams, dtype=torch.long, device=input_ids.device)
        processed_all = torch.zeros_like(outputs.logits[:, -1, :])
        raw = raw + (outputs.logits[:, -1, :].to(copy=True, device=input_ids.device),) if raw is not None else None
        for group in range(num_groups):
            rows = list(range(group * size, (group + 1) * size))
            group_ids = input_ids[rows]
            logits = outputs.logits[rows, -1, :].to(dtype=torch.float32, device=input_ids.device)
            processed = processors(cast(torch.LongTensor, group_ids), torch.log_softmax(logits, dim=-1),
                                   current_tokens=current, beam_group_idx=group)
            processed_all[rows] = processed
            tokens, parents = state.advance(group, group_ids, processed, current, input_ids.shape[1] - prompt_len,
                                            record)
            input_ids[rows] = group_ids[parents]
            current[rows] = tokens.to(current)
            reorder[rows] = rows[0] + parents.to(reorder)
        scores = scores + (processed_all,) if scores is not None else None
        input_ids = torch.cat([input_ids, current.unsqueeze(-1)], dim=-1)
        del outputs
        cache.reorder_cache(cast(torch.LongTensor, reorder))
        if all(state.done) or all(stopping_criteria(cast(torch.LongTensor, input_ids), cast(Any, scores))):
            break
        inputs = model.prepare_inputs_for_generation(input_ids, next_sequence_length=1, **model_kwargs)
        outputs = model(**inputs, return_dict=True)
    sequences, sequences_scores = state.finalize(input_ids, prompt_len, cfg.num_return_sequences, max_length)
    if not keep:
        return sequences
    return GenerateBeamDecoderOnlyOutput(sequences=cast(torch.LongTensor, sequences),
                                         sequences_scores=cast(Any, sequences_scores if scores is not None else None),
                                         scores=cast(Any, scores), logits=cast(Any, raw), past_key_values=cache)


def _knobs(config: GenerationConfig, model: Any, synced_gpus: bool, rows: int) -> tuple[int, int, float]:
    """num_beams, num_beam_groups and diversity_penalty, which generate() leaves in the config, checked as 4.52
    checked them, and what this port does not cover refused with the reason."""
    if synced_gpus or model.config.is_encoder_decoder:
        raise NotImplementedError("diverse beam search here is for decoder-only models on one device")
    beams, groups, penalty = config.num_beams or 1, config.num_beam_groups or 1, config.diversity_penalty or 0.0
    returned = config.num_return_sequences or 1
    for holds, needs in ((groups >= 2 and beams % groups == 0, f"num_beam_groups >= 2 dividing num_beams: {groups}, "
                          f"{beams}"),
                         (penalty > 0.0, f"diversity_penalty > 0, else the groups are identical: {penalty}"),
                         (not config.do_sample, "do_sample=False"),
                         (returned <= beams, f"num_return_sequences <= num_beams: {returned}, {beams}"),
                         (rows == beams, f"one prompt, its num_beams={beams} rows: {rows} rows")):
        if not holds:
            raise ValueError(f"diverse beam search here needs {needs}")
    return beams, groups, float(penalty)


def _with_hamming(processors: LogitsProcessorList, hamming: HammingDiversity) -> LogitsProcessorList:
    """generate()'s processors with the Hamming penalty where 4.52 put it: after classifier-free guidance and
    sequence bias, before the rest (the order changes the scores when a repetition penalty or the like runs)."""
    first = (UnbatchedClassifierFreeGuidanceLogitsProcessor, SequenceBiasLogitsProcessor)
    at = next((i for i, p in enumerate(processors) if not isinstance(p, first)), len(processors))
    return LogitsProcessorList([*processors[:at], hamming, *processors[at:]])


def _prefill(model: Any, input_ids: torch.Tensor, generation_config: GenerationConfig,
             model_kwargs: dict[str, Any]) -> tuple[Any, Cache]:
    """The prompt's forward over all beams' rows (as 4.52 ran it: same shapes, same bits), into the empty cache
    that the loop reorders after each step (4.52 used a DynamicCache; every cache type reorders its rows).
    generate()'s own prefill runs it, in chunks where the run asks for them (prefill.py, where they are exact)."""
    cache = model_kwargs.get("past_key_values")
    if not model_kwargs.get("use_cache", True) or cache is None:
        raise ValueError("diverse beam search needs use_cache=True (it reorders the cache's rows)")
    if not isinstance(cache, Cache) or cache.get_seq_length() > 0:
        raise ValueError("diverse beam search needs an empty Cache (it reorders its batch rows)")
    return prefill(model, input_ids, generation_config, model_kwargs), cache


class DiverseBeam(OwnLoop):
    """The strategy's plug-in: this loop, recording each step's beams by group as the beam tree. Nothing streams:
    beams change until the search ends."""

    streams = False
    probes = False  # several hypotheses per step: no one distribution per token

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec, diverse_beam_search, settings.diverse_beam)

    def recorded(self, call: Call, first: list[int]) -> Recorded:
        return Recorded(beam_tree=group_tree(self.steps).tree(first))

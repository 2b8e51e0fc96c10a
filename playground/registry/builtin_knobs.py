"""The built-in knobs: every RunSpec key a cache, a strategy or a stage of the logits chain reads, with its type,
default, range and how the page, the CLI and the sweep present it.

Registered in the order RunSpec checks them: the first value out of range is the one reported. A knob with a
`group` is drawn by the column card from this record alone (a slider over its own range where it has a
`step`): the logits chain's groups, or a strategy's (shown while the column's strategy reads one of its knobs);
a knob without one has widgets of its own in playground/ui/card_groups.py.
"""

from __future__ import annotations

import math

from playground.registry.entries import Knob, Range
from playground.registry.store import register_knob

MAX_BEAMS = 8
CACHE_BITS = (2, 4, 8)
# a side's own bits: 0 follows cache_bits
SIDE_BITS = (0, *CACHE_BITS)
# what the full-precision caches store keys and values as; attention computes in fp32 either way
CACHE_DTYPES = ("fp32", "bf16")
DRY_BREAKERS = '["\\n", ":", "\\"", "*"]'  # text-generation-webui's and llama.cpp's default sequence breakers
# the PyTorch path's engines: eager ("off"), or generate's decode step compiled by torch.compile in one of its modes
TORCH_COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune-no-cudagraphs")

# the column card's groups of chain knobs: the four everyone knows, the rest folded under them, the penalties
SAMPLING, MORE_SAMPLING, PENALTIES = "sampling", "more sampling", "penalties"
# the strategies' groups of the column card, each shown while the column's strategy reads one of its knobs
BEAM, DIVERSE, CONTRASTIVE, DOLA = "beam", "diverse", "contrastive", "dola"
# why a draft knob is refused under a strategy without drafts
_DRAFTS = "a draft model or prompt lookup drafts only for a strategy that verifies drafts"

CONSTRAINT_KINDS = ("none", "regex", "json_schema", "choice", "grammar")
P_LESS_MODES = (0, 1, 2)  # off, p-less, p-less-norm (the two variants of the p-less authors' code)

for _knob in (
    # -- the constraint: the first stage of the logits chain, on every strategy ----------------------------
    Knob(name="constraint", kind=str, default="none", choices=CONSTRAINT_KINDS, label="constraint",
         help="the output must match a regex, a JSON schema, one of a list of choices or a Lark grammar: tokens that "
              "cannot continue a match are masked out first, before the sampling stages"),
    Knob(name="constraint_text", kind=str, default="", label="constraint text",
         help="the regex, the JSON schema, the choices (one per line, or |-separated) or the Lark grammar"),
    # -- the sampling stages of the logits chain (only when the strategy samples) ----------------------------
    Knob(name="temperature", default=1.0, low=0.0, high=5.0, low_open=True, group=SAMPLING, step=0.05,
         lab=Range(0.0, math.inf),  # 0: llama.cpp's greedy, the best token keeps p = 1
         help="divides the logits: below 1 sharpens the distribution, above 1 flattens it", sweep="distinct_2"),
    # the number of kept candidates is an array shape
    Knob(name="top_k", kind=int, default=50, low=0, high=1000, shapes=True, group=SAMPLING, step=1,
         lab=Range(0, math.inf),  # k past the vocabulary keeps every token
         label="top-k (0 = off)", help="keeps the k most likely tokens", sweep="distinct_2"),
    Knob(name="top_p", default=1.0, low=0.0, high=1.0, low_open=True, group=SAMPLING, step=0.01,
         lab=Range(0.0, 1.0),  # 0: only the best token stays
         label="top-p (1 = off)", help="keeps the most likely tokens until their mass reaches p (nucleus)",
         sweep="distinct_2"),
    Knob(name="min_p", default=0.0, low=0.0, high=1.0, group=SAMPLING, step=0.01, label="min-p (0 = off)",
         lab=Range(0.0, math.inf),  # above 1 no token passes, and the best stays: as 1, the tokens at the maximum
         help="removes tokens less likely than min_p x the most likely one", sweep="distinct_2"),
    Knob(name="typical_p", default=1.0, low=0.0, high=1.0, low_open=True, group=MORE_SAMPLING, step=0.01,
         label="typical-p (1 = off)",
         help="keeps the tokens whose surprise is closest to the entropy, until their mass reaches p",
         sweep="distinct_2"),
    Knob(name="epsilon_cutoff", default=0.0, low=0.0, high=0.1, group=MORE_SAMPLING, step=0.0001,
         label="epsilon cutoff (0 = off)", help="removes tokens with probability below epsilon",
         sweep="distinct_2"),
    Knob(name="eta_cutoff", default=0.0, low=0.0, high=0.1, group=MORE_SAMPLING, step=0.0001,
         label="eta cutoff (0 = off)",
         help="removes tokens below min(eta, sqrt(eta) x exp(-entropy)): a cutoff that adapts to the entropy",
         sweep="distinct_2"),
    Knob(name="top_n_sigma", default=0.0, low=0.0, high=5.0, group=MORE_SAMPLING, step=0.05,
         label="top-nσ (0 = off)", help="keeps the logits within n standard deviations of the largest",
         sweep="distinct_2"),
    Knob(name="xtc_threshold", default=0.1, low=0.0, high=0.5, low_open=True, group=MORE_SAMPLING, step=0.01,
         label="XTC threshold", help="XTC: the probability a token needs to count as a top choice",
         sweep="distinct_2"),
    Knob(name="xtc_probability", default=0.0, low=0.0, high=1.0, group=MORE_SAMPLING, step=0.05,
         label="XTC probability (0 = off)",
         help="XTC: how often the top choices but the least likely of them are excluded", sweep="distinct_2"),
    # -- samplers from llama.cpp and text-generation-webui (docs/samplers.md: definitions and sources) ----------
    Knob(name="dynatemp_range", default=0.0, low=0.0, high=5.0, group=MORE_SAMPLING, step=0.05,
         label="dynamic temperature range (0 = off)",
         help="the temperature moves within temperature ± range with the candidates' normalised entropy "
              "(llama.cpp's dynatemp_range); it replaces the fixed temperature", sweep="distinct_2"),
    Knob(name="dynatemp_exponent", default=1.0, low=0.0, high=10.0, low_open=True, group=MORE_SAMPLING, step=0.05,
         label="dynamic temperature exponent",
         help="dynamic temperature: the normalised entropy is raised to this power before it sets the temperature",
         sweep="distinct_2"),
    Knob(name="top_a", default=0.0, low=0.0, high=1.0, group=MORE_SAMPLING, step=0.01, label="top-a (0 = off)",
         help="removes tokens less likely than top_a x (the best token's probability)²", sweep="distinct_2"),
    Knob(name="p_less", kind=int, default=0, choices=P_LESS_MODES, group=MORE_SAMPLING,
         label="p-less (0 = off, 1 = p-less, 2 = p-less-norm)",
         help="removes tokens less likely than the distribution's Σp² (1), or its normalised form (2); "
              "no parameter to tune", sweep="distinct_2"),
    Knob(name="mirostat_tau", default=0.0, low=0.0, high=20.0, group=MORE_SAMPLING, step=0.1,
         label="mirostat v2 τ, bits (0 = off)",
         help="mirostat v2: the target surprise per token; tokens more surprising than μ are cut, and μ follows "
              "the surprise of each chosen token", sweep="distinct_2"),
    Knob(name="mirostat_eta", default=0.1, low=0.0, high=1.0, group=MORE_SAMPLING, step=0.01,
         label="mirostat v2 η", help="mirostat v2: how fast μ follows the error between the surprise and τ",
         sweep="distinct_2"),
    Knob(name="adaptive_target", default=0.0, low=0.0, high=1.0, group=MORE_SAMPLING, step=0.01,
         label="adaptive-p target (0 = off)",
         help="adaptive-p: the probability the chosen tokens should have on average; candidates near the adapted "
              "target are favoured", sweep="distinct_2"),
    Knob(name="adaptive_decay", default=0.9, low=0.0, high=0.99, group=MORE_SAMPLING, step=0.01,
         label="adaptive-p decay",
         help="adaptive-p: the weight of the past in the running average of the chosen tokens' probabilities",
         sweep="distinct_2"),
    Knob(name="sampler_order", kind=str, default="", group=MORE_SAMPLING, label="sampler order (empty = default)",
         help="the chain's stages in the order to apply them, comma-separated, e.g. top_k,temperature,min_p; "
              "the stages named trade places, the others keep theirs"),
    # -- processors: every strategy, greedy and beam search included ----------------------------------------
    Knob(name="repetition_penalty", default=1.0, low=0.0, high=3.0, low_open=True, group=PENALTIES, step=0.05,
         lab=Range(0.0, math.inf, low_open=True),
         label="repetition penalty (1 = off)",
         help="divides a positive logit (multiplies a negative one) of every token already in the text",
         sweep="repeat_4gram_rate"),
    Knob(name="presence_penalty", default=0.0, low=-2.0, high=2.0, group=PENALTIES, step=0.05,
         lab=Range(-math.inf, math.inf),
         label="presence penalty (0 = off)", help="subtracted once from the logit of every token generated so far",
         sweep="repeat_4gram_rate"),
    Knob(name="frequency_penalty", default=0.0, low=-2.0, high=2.0, group=PENALTIES, step=0.05,
         lab=Range(-math.inf, math.inf),
         label="frequency penalty (0 = off)",
         help="subtracted from a token's logit once per time it was generated so far", sweep="repeat_4gram_rate"),
    # the n-gram's length is an array shape
    Knob(name="no_repeat_ngram_size", kind=int, default=0, low=0, high=10, shapes=True, group=PENALTIES, step=1,
         label="no-repeat n-gram size (0 = off)", help="bans any token that would repeat an n-gram of the text",
         sweep="repeat_4gram_rate"),
    Knob(name="dry_multiplier", default=0.0, low=0.0, high=5.0, group=PENALTIES, step=0.05,
         label="DRY multiplier (0 = off)",
         help="DRY: penalises the token that would extend a sequence already in the text", sweep="repeat_4gram_rate"),
    Knob(name="dry_base", default=1.75, low=1.0, high=4.0, low_open=True, group=PENALTIES, step=0.05,
         label="DRY base", help="DRY: the penalty grows by this factor per token of repeated sequence"),
    Knob(name="dry_allowed_length", kind=int, default=2, low=1, high=20, group=PENALTIES, step=1,
         label="DRY allowed length", help="DRY: repeated sequences up to this length go unpenalised"),
    Knob(name="dry_sequence_breakers", kind=str, default=DRY_BREAKERS, group=PENALTIES,
         label="DRY sequence breakers",
         help="DRY: a JSON list of strings; a token containing one ends a repeated sequence"),
    Knob(name="logit_bias", kind=str, default="", group=PENALTIES, label="logit bias (JSON {token id: bias})",
         help="adds each bias (-100 to 100) to its token's logit, before every stage but the constraint (OpenAI's "
              "logit_bias); empty = off"),
    # -- run, strategies and caches --------------------------------------------------------------------------
    # high: the token cap; the cache's length and a beam's token columns follow it
    Knob(name="max_new_tokens", kind=int, default=64, low=1, shapes=True, sweep="mean_logprob"),
    Knob(name="min_new_tokens", kind=int, default=0, low=0),  # high: max_new_tokens
    # step mode: every step of a branch tree on the programs of its first (high: the token cap)
    Knob(name="sized_new_tokens", kind=int, default=0, low=0, shapes=True,
         help="JAX: size the compiled programs for this many tokens after the prompt, prefix_ids included, so that "
              "every step of a branch tree runs on its first step's programs; 0: sized for this request alone"),
    Knob(name="seed", kind=int, default=0, low=0, high=2**32 - 1),
    Knob(name="num_beams", kind=int, default=4, low=1, high=MAX_BEAMS, shapes=True, sweep="mean_logprob",
         group=BEAM, step=1, label="beams", help="beam search: the hypotheses kept at every step (2 or more)"),
    Knob(name="length_penalty", default=1.0, low=-10.0, high=10.0, group=BEAM, step=0.1, label="length penalty",
         help="beam search: a finished hypothesis scores its log-probability / length^this (above 0 favours "
              "longer ones)"),
    # diverse beam search: its beams in groups that penalise each other's tokens (the groups' count is a shape)
    Knob(name="num_beam_groups", kind=int, default=2, low=2, high=MAX_BEAMS, shapes=True, label="beam groups",
         help="diverse beam search: the beams split into this many groups, which must divide num_beams",
         sweep="returned_overlap", group=DIVERSE, step=1),
    Knob(name="diversity_penalty", default=1.0, low=0.0, high=10.0, low_open=True, step=0.1, group=DIVERSE,
         label="diversity penalty",
         help="diverse beam search: subtracted from a group's log-probability of a token once per earlier group "
              "that chose it at the same step", sweep="returned_overlap"),
    # contrastive search: the weight of the degeneration penalty against the model's probability (its candidates
    # are the top_k most likely tokens)
    # DoLa: the early ("premature") layers whose logits the final layer's are contrasted with
    Knob(name="dola_layers", kind=str, default="high", label="DoLa layers", group=DOLA,
         help="DoLa: 'low' or 'high' (the lower or upper half of the layers, every second one) or layer indices, "
              "e.g. 0,2,4"),
    Knob(name="penalty_alpha", default=0.6, low=0.0, high=1.0, step=0.05, label="penalty α", group=CONTRASTIVE,
         help="contrastive search: score = (1 - α)·p - α·(the candidate's greatest similarity to the text so far)",
         sweep="repeat_4gram_rate"),
    # the verify pass's width
    Knob(name="prompt_lookup", kind=int, default=0, low=0, high=64, shapes=True, sweep="tokens_per_pass",
         unread=_DRAFTS),
    Knob(name="cache_bits", kind=int, default=4, choices=CACHE_BITS, shapes=True, sweep="agreement"),
    Knob(name="cache_key_bits", kind=int, default=0, choices=SIDE_BITS, shapes=True, sweep="agreement",
         label="key bits (0 = cache bits)",
         help="quantized cache: the keys' bits apart from the values' (0: cache_bits)"),
    Knob(name="cache_value_bits", kind=int, default=0, choices=SIDE_BITS, shapes=True, sweep="agreement",
         label="value bits (0 = cache bits)",
         help="quantized cache: the values' bits apart from the keys' (0: cache_bits)"),
    Knob(name="cache_dtype", kind=str, default="fp32", choices=CACHE_DTYPES, shapes=True, sweep="agreement",
         label="cache store",
         help="dynamic, static, sliding and sink caches: store keys and values in bfloat16 (half the bytes) or fp32; "
              "attention computes in fp32 either way"),
    Knob(name="residual_length", kind=int, default=128, low=1, high=100_000, shapes=True, sweep="agreement"),
    Knob(name="window", kind=int, default=256, low=1, high=1_000_000, shapes=True, sweep="agreement"),
    Knob(name="sink_tokens", kind=int, default=4, low=0, high=1024, shapes=True, sweep="agreement"),
    Knob(name="devices", kind=int, default=1, low=1, high=64, shapes=True),
    Knob(name="repeats", kind=int, default=1, low=1, high=5),
    Knob(name="reuse", kind=bool, default=True, label="reuse the kept cache",
         help="start from the longest prefix of the prompt whose cache an earlier run of this session (or API key "
              "and cache_salt) left, prefilling only the rest; where a warm run can differ from a cold one (a "
              "quantized, sliding or sink cache, a JAX bf16 store) the run says by how much"),
    # the PyTorch path's compiler: its own widget, on PyTorch columns only (RunSpec refuses it elsewhere)
    Knob(name="torch_compile", kind=str, default="off", choices=TORCH_COMPILE_MODES, label="torch.compile",
         help="PyTorch only: generate's decode step compiled by torch.compile (inductor) over the static cache, "
              "in this mode, its compile time reported apart; off: eager"),
    # strategies' knobs that must keep their default under the other strategies (RunSpec checks it)
    Knob(name="num_return_sequences", kind=int, default=1, low=1, high=MAX_BEAMS, shapes=True, group=BEAM, step=1,
         label="returned sequences", help="beam search: how many of the best hypotheses are returned",
         unread="it returns the best num_return_sequences beams; other strategies return 1"),
    Knob(name="early_stopping", kind=bool, default=False, group=BEAM, label="early stopping",
         help="beam search: stop at num_beams finished"),
    Knob(name="assistant", kind=str, default=None, unread=_DRAFTS),
    Knob(name="assisted_sampling", kind=bool, default=False, unread=_DRAFTS,
         help="assisted decoding: sample with the sampling knobs (speculative sampling)"),
):
    register_knob(_knob)

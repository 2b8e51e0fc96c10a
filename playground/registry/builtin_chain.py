"""The built-in stages of the logits chain, registered in the default order.

The order is transformers' for the stages it has (its processors, then its warpers: temperature, top-k, top-p,
min-p, typical-p, epsilon, eta); the stages it lacks go where llama.cpp's default chain
(`penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`) puts them: presence and frequency
penalties with the repetition penalty, DRY after the penalties, top-nσ before top-k, XTC after min-p.
Each stage's definition and source are in docs/samplers.md.
"""

from __future__ import annotations

from collections.abc import Callable

from playground.errors import PlaygroundError
from playground.registry import (
    builtin_knobs,  # noqa: F401  (the stages read these knobs)
)
from playground.registry.chain import parse_breakers, parse_logit_bias
from playground.registry.entries import Processor, RunSpec, lazy
from playground.registry.store import register_processor

_JAX = "playground.backends.jax.chain.stages"
# backend -> the module holding the built-in stages' sides there
_SIDES = {"torch": "playground.backends.torch.chain", "jax": _JAX}


def _stage(name: str, label: str, help: str, knobs: tuple[str, ...], active: Callable[[RunSpec], bool], *,
           impl: dict[str, str], samples_only: bool = True, validate: Callable[[RunSpec], None] | None = None,
           idle: Callable[[RunSpec], bool] | None = None, strategies: tuple[str, ...] = (),
           strategies_why: str = "") -> Processor:
    return register_processor(Processor(
        name=name, label=label, help=help, knobs=knobs, active=active, samples_only=samples_only,
        impl={backend: lazy(_SIDES[backend], side) for backend, side in impl.items()}, validate=validate, idle=idle,
        strategies=strategies, strategies_why=strategies_why))


def _check_breakers(spec: RunSpec) -> None:
    parse_breakers(spec.dry_sequence_breakers)


def _check_bias(spec: RunSpec) -> None:
    parse_logit_bias(spec.logit_bias)


def _penalised(spec: RunSpec) -> bool:
    return spec.presence_penalty != 0.0 or spec.frequency_penalty != 0.0


# -- the constraint: first, so that every later stage sees only the tokens the grammar allows -----------------
register_processor(Processor(
    name="constraint", label="constraint ({constraint})",
    help="masks every token that cannot continue a match of the regex, JSON schema, choices or grammar (llguidance)",
    knobs=("constraint",), active=lambda spec: spec.constraint != "none", samples_only=False,
    impl={"torch": lazy("playground.backends.torch.constrained", "constraint_mask"), "jax": lazy(_JAX, "Constraint")},
    validate=lazy("playground.constraints.grammar", "check_run")))

# -- processors: every strategy ------------------------------------------------------------------------------
# the bias first: it says which tokens the caller wants more or less of, as the model's logits come out
_stage("logit_bias", "logit bias ({logit_bias})", "adds each given bias to its token's logit (OpenAI's logit_bias)",
       ("logit_bias",), lambda spec: bool(parse_logit_bias(spec.logit_bias)),
       impl={"torch": "logit_bias", "jax": "LogitBias"}, samples_only=False, validate=_check_bias)
_stage("repetition_penalty", "repetition penalty {repetition_penalty}",
       "a token already in the text has its logit divided (multiplied, when negative) by the penalty",
       ("repetition_penalty",), lambda spec: spec.repetition_penalty != 1.0,
       impl={"torch": "repetition_penalty", "jax": "RepetitionPenalty"}, samples_only=False)
_stage("presence_frequency", "presence {presence_penalty} / frequency {frequency_penalty} penalty",
       "subtracts presence x (generated before) + frequency x (times generated) from each token's logit",
       ("presence_penalty", "frequency_penalty"), _penalised,
       impl={"torch": "presence_frequency", "jax": "PresenceFrequency"}, samples_only=False)
_stage("no_repeat_ngram", "no repeated {no_repeat_ngram_size}-grams",
       "bans every token that would complete an n-gram already in the text",
       ("no_repeat_ngram_size",), lambda spec: spec.no_repeat_ngram_size > 0,
       impl={"torch": "no_repeat_ngram", "jax": "NoRepeatNGram"}, samples_only=False)
_stage("dry", "DRY (x{dry_multiplier}, base {dry_base}, allowed {dry_allowed_length})",
       "penalises the token that would extend a repeated sequence, exponentially in the sequence's length",
       ("dry_multiplier", "dry_base", "dry_allowed_length", "dry_sequence_breakers"),
       lambda spec: spec.dry_multiplier > 0.0, impl={"torch": "dry", "jax": "Dry"}, samples_only=False,
       validate=_check_breakers)
# always in the chain, so that a new min_new_tokens (0 included) is a traced value and compiles nothing
_stage("min_new_tokens", "min_new_tokens ({min_new_tokens}: no end of text yet)",
       "bans the end-of-text tokens until min_new_tokens tokens exist",
       ("min_new_tokens",), lambda spec: True, idle=lambda spec: spec.min_new_tokens == 0,
       impl={"torch": "min_new_tokens", "jax": "MinNewTokens"}, samples_only=False)

# -- sampling stages: only when the strategy samples ---------------------------------------------------------
_stage("temperature", "temperature {temperature}", "divides the logits by the temperature",
       ("temperature",), lambda spec: spec.dynatemp_range == 0.0, impl={"torch": "temperature", "jax": "Temperature"})
# where the temperature stands: it replaces the fixed temperature when its range is not 0 (llama.cpp's temp-ext)
_stage("dynamic_temperature",
       "dynamic temperature ({temperature} ± {dynatemp_range}, exponent {dynatemp_exponent})",
       "divides the logits by a temperature within temperature ± range, set by the candidates' normalised entropy",
       ("temperature", "dynatemp_range", "dynatemp_exponent"), lambda spec: spec.dynatemp_range > 0.0,
       impl={"torch": "dynamic_temperature", "jax": "DynamicTemperature"})
_stage("top_n_sigma", "top-nσ (n={top_n_sigma})", "keeps the logits within n standard deviations of the largest",
       ("top_n_sigma",), lambda spec: spec.top_n_sigma > 0.0, impl={"torch": "top_n_sigma", "jax": "TopNSigma"})
_stage("top_k", "top-k (k={top_k})", "keeps the k most likely tokens",
       ("top_k",), lambda spec: spec.top_k > 0, impl={"torch": "top_k", "jax": "TopK"})
_stage("top_p", "top-p ({top_p})", "keeps the most likely tokens until their mass reaches p",
       ("top_p",), lambda spec: spec.top_p < 1.0, impl={"torch": "top_p", "jax": "TopP"})
_stage("min_p", "min-p ({min_p} × the best)", "removes tokens less likely than min_p x the most likely one",
       ("min_p",), lambda spec: spec.min_p > 0.0, impl={"torch": "min_p", "jax": "MinP"})
_stage("xtc", "XTC (threshold {xtc_threshold}, probability {xtc_probability})",
       "with its probability, removes every token above the threshold except the least likely of them",
       ("xtc_threshold", "xtc_probability"), lambda spec: spec.xtc_probability > 0.0,
       impl={"torch": "xtc", "jax": "Xtc"})
_stage("typical_p", "typical-p ({typical_p})",
       "keeps the tokens whose surprise is closest to the entropy, until their mass reaches p",
       ("typical_p",), lambda spec: spec.typical_p < 1.0, impl={"torch": "typical_p", "jax": "TypicalP"})
_stage("epsilon_cutoff", "epsilon cutoff ({epsilon_cutoff})", "removes tokens with probability below epsilon",
       ("epsilon_cutoff",), lambda spec: spec.epsilon_cutoff > 0.0,
       impl={"torch": "epsilon_cutoff", "jax": "EpsilonCutoff"})
_stage("eta_cutoff", "eta cutoff ({eta_cutoff})", "removes tokens below min(eta, sqrt(eta) x exp(-entropy))",
       ("eta_cutoff",), lambda spec: spec.eta_cutoff > 0.0, impl={"torch": "eta_cutoff", "jax": "EtaCutoff"})

# -- after ours: text-generation-webui's top-a, p-less, then the two that carry state from token to token ----------
_stage("top_a", "top-a ({top_a} × the best²)", "removes tokens less likely than top_a x the best probability squared",
       ("top_a",), lambda spec: spec.top_a > 0.0, impl={"torch": "top_a", "jax": "TopA"})
_stage("p_less", "p-less (mode {p_less})",
       "removes tokens less likely than Σp² of the distribution (p-less-norm: its normalised form)",
       ("p_less",), lambda spec: spec.p_less > 0, impl={"torch": "p_less", "jax": "PLess"})


# a state that follows the tokens of one drawn sequence: beam sampling's hypotheses and assisted decoding's
# rejected drafts would each need a state of their own
ONE_SEQUENCE = ("sampling",)
ONE_SEQUENCE_WHY = "it carries its state from one drawn token to the next of a single sequence"


def _one_sequence(knob: str) -> Callable[[RunSpec], None]:
    def check(spec: RunSpec) -> None:
        if getattr(spec, knob) > 0.0 and spec.strategy not in ONE_SEQUENCE:
            raise PlaygroundError(f"{knob}={getattr(spec, knob)}: {ONE_SEQUENCE_WHY}, so it runs with "
                                  f"strategy=sampling only, not {spec.strategy}; set {knob} to 0 or choose sampling")
    return check


_stage("mirostat", "mirostat v2 (τ {mirostat_tau}, η {mirostat_eta})",
       "cuts tokens whose surprise exceeds μ, then moves μ by η x (the chosen token's surprise - τ)",
       ("mirostat_tau", "mirostat_eta"), lambda spec: spec.mirostat_tau > 0.0,
       impl={"torch": "mirostat_v2", "jax": "MirostatV2"},
       validate=_one_sequence("mirostat_tau"), strategies=ONE_SEQUENCE, strategies_why=ONE_SEQUENCE_WHY)
_stage("adaptive_p", "adaptive-p (target {adaptive_target}, decay {adaptive_decay})",
       "re-weights the candidates towards a target probability adapted to the chosen tokens' running average",
       ("adaptive_target", "adaptive_decay"), lambda spec: spec.adaptive_target > 0.0,
       impl={"torch": "adaptive_p", "jax": "AdaptiveP"},
       validate=_one_sequence("adaptive_target"), strategies=ONE_SEQUENCE, strategies_why=ONE_SEQUENCE_WHY)

"""The built-in stages of the logits chain on JAX (their registry entries name these classes).

Each matches its PyTorch twin (playground/backends/torch/chain.py): transformers' own processor where one
exists, our own where none does; docs/stage_math.md gives each definition and its source.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import lru_cache, partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from playground.backends.jax.chain import stage_math
from playground.backends.jax.chain.chain import Candidates, Context, Needs, View
from playground.registry.chain import parse_breakers, parse_logit_bias
from playground.spec import RunSpec

F32, I32 = np.float32, np.int32
Args = tuple[Any, ...]  # a stage's traced values: NumPy scalars and arrays


class Stage:
    """Defaults: reads nothing of the text, draws nothing, no static key, no arguments."""

    needs = Needs()
    random = False
    per_row = False

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        return ()

    def args(self, spec: RunSpec, context: Context) -> Args:
        return ()


def _removed(cands: Candidates, remove: jax.Array) -> Candidates:
    return cands._replace(values=jnp.where(remove, -jnp.inf, cands.values))


class Constraint(Stage):
    """The constraint's mask (playground/constraints): the tokens its grammar allows next, a row per beam or verify
    position. The host's matchers send new rows before every call (plain decoding and beam search run one step
    per call while constrained); every token is allowed until the first rows arrive."""

    per_row = True

    def args(self, spec: RunSpec, context: Context) -> Args:
        return (np.ones((context.rows, context.vocab_size), bool),)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        (allowed,) = args  # (rows, V): a batch narrower than the rows (a start's one row) reads the first ones
        batch = cands.values.shape[0]
        rows = allowed[:batch] if allowed.shape[0] >= batch else jnp.broadcast_to(allowed, (batch, allowed.shape[1]))
        return _removed(cands, ~view.table(cands, rows))


class LogitBias(Stage):
    """OpenAI's logit_bias (transformers' SequenceBiasLogitsProcessor for one-token sequences): each given bias
    added to its token's logit. How many tokens it names sets an argument's shape, so it is the static key."""

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        return len(parse_logit_bias(spec.logit_bias))

    def args(self, spec: RunSpec, context: Context) -> Args:
        pairs = parse_logit_bias(spec.logit_bias)
        return np.array([t for t, _ in pairs], np.int32), np.array([b for _, b in pairs], np.float32)  # (K,), (K,)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        ids, biases = args
        if cands.ids is None:  # the whole vocabulary: add at the ids
            return cands._replace(values=cands.values.at[:, ids].add(biases))
        hits = cands.ids[..., None] == ids  # (B, N, K): a narrowed set (an order that puts the bias after top-k)
        return cands._replace(values=cands.values + (hits * biases).sum(-1))


class RepetitionPenalty(Stage):
    """RepetitionPenaltyLogitsProcessor: a token of the prompt or the text so far has its logit divided by the
    penalty when positive, multiplied when negative."""

    needs = Needs(seen=True)

    def args(self, spec: RunSpec, context: Context) -> Args:
        return (F32(spec.repetition_penalty),)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        (penalty,) = args
        v = cands.values
        penalised = jnp.where(v < 0, v * penalty, v / penalty)
        return cands._replace(values=jnp.where(view.table(cands, view.history.seen), penalised, v))


class PresenceFrequency(Stage):
    """OpenAI's presence and frequency penalties over the generated tokens (not the prompt). A branch's forced
    prefix counts as generated (the run it came from generated it): its counts are an argument, (1, V) whatever
    its length, so a new prefix compiles nothing."""

    needs = Needs(counts=True)

    def args(self, spec: RunSpec, context: Context) -> Args:
        forced = np.zeros((1, context.vocab_size), np.int32)
        np.add.at(forced[0], np.asarray(spec.prefix_ids, np.int64), 1)
        return F32(spec.presence_penalty), F32(spec.frequency_penalty), forced

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        presence, frequency, forced = args
        counts = view.table(cands, view.history.counts + forced).astype(jnp.float32)  # (B, N)
        return cands._replace(values=cands.values - frequency * counts - presence * (counts > 0))


class NoRepeatNGram(Stage):
    """NoRepeatNGramLogitsProcessor over the prompt and the text so far; n sets a shape."""

    needs = Needs(ids=1)

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        return int(spec.no_repeat_ngram_size), context.vocab_size

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        n, vocab = static
        banned = stage_math.banned_ngrams(view.history.ids, view.history.length, n, vocab)  # (B, V)
        return _removed(cands, view.table(cands, banned))


@lru_cache(maxsize=8)
def _breaker_mask(tokenizer: Any, breakers: tuple[str, ...], vocab_size: int) -> np.ndarray:
    """(V,) bool: tokens whose text contains a sequence breaker (the PyTorch path asks the same function)."""
    from playground.backends.dry_breakers import breaker_ids

    mask = np.zeros((vocab_size,), bool)
    mask[[i for i in breaker_ids(tokenizer, breakers) if i < vocab_size]] = True
    return mask


class Dry(Stage):
    """DRY (text-generation-webui's reference definition): the token that would extend a sequence already in
    the text is penalised by multiplier x base^(length - allowed_length)."""

    needs = Needs(ids=1)

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        return context.vocab_size

    def args(self, spec: RunSpec, context: Context) -> Args:
        if context.breakers is not None:
            breakers = np.zeros((context.vocab_size,), bool)
            breakers[[i for i in context.breakers if i < context.vocab_size]] = True
        else:
            breakers = _breaker_mask(context.tokenizer, parse_breakers(spec.dry_sequence_breakers),
                                     context.vocab_size)
        return F32(spec.dry_multiplier), F32(spec.dry_base), I32(spec.dry_allowed_length), breakers

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        multiplier, base, allowed, breakers = args
        penalties = stage_math.dry_penalties(view.history.ids, view.history.length, breakers, multiplier, base,
                                           allowed, static)  # (B, V)
        return cands._replace(values=cands.values - view.table(cands, penalties))


class MinNewTokens(Stage):
    """MinNewTokensLengthLogitsProcessor: no end-of-text token before min_new_tokens new tokens."""

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        return context.eos, context.vocab_size

    def args(self, spec: RunSpec, context: Context) -> Args:
        # a branch's forced prefix counts as generated: step k of a branch blocks EOS as step k of its run did
        return (I32(spec.min_new_tokens - len(spec.prefix_ids)),)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        eos, vocab = static
        if not eos:
            return cands
        (minimum,) = args
        is_eos = jnp.zeros((1, vocab), bool).at[0, jnp.asarray(eos)].set(True, mode="drop")
        blocked = view.table(cands, jnp.broadcast_to(is_eos, (cands.values.shape[0], vocab)))
        return _removed(cands, blocked & (view.produced < minimum))


class Temperature(Stage):
    """TemperatureLogitsWarper; 0 (the sampler lab's edge, a run refuses it) keeps the best logit(s): greedy."""

    def args(self, spec: RunSpec, context: Context) -> Args:
        return (F32(spec.temperature),)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        (temperature,) = args
        scaled = cands.values / jnp.where(temperature > 0, temperature, 1.0)
        return cands._replace(values=jnp.where(temperature > 0, scaled, stage_math.keep_best(cands.values)))


class TopK(Stage):
    """TopKLogitsWarper as a narrowing: the k best become the candidate set (k is a shape, hence static)."""

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        k = max(spec.top_k, context.keep)
        return k if 0 < spec.top_k and k < context.vocab_size else 0

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        if not static or static >= cands.values.shape[-1]:
            return cands
        values, positions = jax.lax.top_k(cands.values, static)  # (B, k), best first
        ids = positions if cands.ids is None else jnp.take_along_axis(cands.ids, positions, axis=-1)
        return Candidates(values, ids.astype(jnp.int32))


def _keep(context: Context) -> Hashable:
    """A filter's static key: how many tokens it must leave (min_tokens_to_keep; () for the usual 1)."""
    return context.keep if context.keep > 1 else ()


class TopP(Stage):
    """TopPLogitsWarper: a token goes when the mass ranked above it already reaches top_p (the best stays)."""

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        return _keep(context)

    def args(self, spec: RunSpec, context: Context) -> Args:
        return (F32(spec.top_p),)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        values = cands.values
        ranked, order = jax.lax.top_k(values, values.shape[-1])  # (B, N) descending
        probs = jax.nn.softmax(ranked, axis=-1)
        keep_ranked = ((jnp.cumsum(probs, axis=-1) - probs) < args[0]).at[..., : static or 1].set(True)
        rows = jnp.arange(values.shape[0])[:, None]
        keep = jnp.zeros(values.shape, bool).at[rows, order].set(keep_ranked)
        return _removed(cands, ~keep)


class MinP(Stage):
    """MinPLogitsWarper: tokens below min_p x the best token's probability go (the best stays)."""

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        return _keep(context)

    def args(self, spec: RunSpec, context: Context) -> Args:
        return (F32(min(spec.min_p, 1.0)),)  # above 1 (the sampler lab's range): as 1, the tokens at the maximum

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        probs = jax.nn.softmax(cands.values, axis=-1)
        remove = probs < args[0] * probs.max(axis=-1, keepdims=True)
        return _removed(cands, stage_math.protected(remove, cands.values, static or 1))


class Xtc(Stage):
    """llama.cpp's XTC: with its probability, every token above the threshold but the least likely goes."""

    random = True

    def args(self, spec: RunSpec, context: Context) -> Args:
        return F32(spec.xtc_threshold), F32(spec.xtc_probability)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        assert view.key is not None, "the chain hands a random stage its key"
        threshold, probability = args
        return cands._replace(values=stage_math.xtc(cands.values, threshold, probability, view.key))


class _Filter(Stage):
    """A filter of stage_math.py whose one traced value is a knob of the same role; `keeps`: it takes
    min_tokens_to_keep, as its transformers warper does."""

    def __init__(self, knob: str, function: Callable[..., jax.Array], keeps: bool = False) -> None:
        self.knob, self.function, self.keeps = knob, function, keeps

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        return _keep(context) if self.keeps else ()

    def args(self, spec: RunSpec, context: Context) -> Args:
        return (F32(getattr(spec, self.knob)),)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        if self.keeps:
            return cands._replace(values=self.function(cands.values, args[0], static or 1))
        return cands._replace(values=self.function(cands.values, args[0]))


TopNSigma = partial(_Filter, "top_n_sigma", stage_math.top_n_sigma)  # llama.cpp's top-nσ
TypicalP = partial(_Filter, "typical_p", stage_math.typical, True)  # TypicalLogitsWarper
EpsilonCutoff = partial(_Filter, "epsilon_cutoff", stage_math.epsilon, True)  # EpsilonLogitsWarper
EtaCutoff = partial(_Filter, "eta_cutoff", stage_math.eta, True)  # EtaLogitsWarper


class TopA(Stage):
    """text-generation-webui's top-a: tokens below top_a x (the best probability)² go."""

    def static(self, spec: RunSpec, context: Context) -> Hashable:
        return _keep(context)

    def args(self, spec: RunSpec, context: Context) -> Args:
        return (F32(spec.top_a),)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        return cands._replace(values=stage_math.top_a(cands.values, args[0], static or 1))


class PLess(Stage):
    """p-less (mode 1) or p-less-norm (mode 2): tokens below Σp² (or its normalised form) go."""

    def args(self, spec: RunSpec, context: Context) -> Args:
        return (I32(spec.p_less),)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        return cands._replace(values=stage_math.p_less(cands.values, args[0]))


class DynamicTemperature(Stage):
    """llama.cpp's temp-ext: a temperature within temperature ± range, set by the candidates' entropy."""

    def args(self, spec: RunSpec, context: Context) -> Args:
        return F32(spec.temperature), F32(spec.dynatemp_range), F32(spec.dynatemp_exponent)

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        return cands._replace(values=stage_math.dynamic_temperature(cands.values, *args))


class MirostatV2(Stage):
    """llama.cpp's mirostat v2: tokens whose surprise (bits) exceeds μ go; μ starts at 2τ and, once a token is
    drawn, moves by -η x (its surprise under the cut distribution - τ). μ is the history's carried float."""

    needs = Needs(carry=("mirostat_mu",))

    def args(self, spec: RunSpec, context: Context) -> Args:
        return F32(spec.mirostat_tau), F32(spec.mirostat_eta)

    def initial(self, args: tuple[jax.Array, ...]) -> jax.Array:
        return 2.0 * args[0]

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        assert view.carry is not None, "the chain hands a carrying stage its state"
        return cands._replace(values=stage_math.mirostat_cut(cands.values, view.carry))

    def observed(self, before: Candidates, after: Candidates) -> Candidates:
        return after._replace(values=jax.nn.softmax(after.values, axis=-1))

    def settled(self, carry: jax.Array, chosen: jax.Array, args: tuple[jax.Array, ...]) -> jax.Array:
        tau, eta = args
        surprise = -jnp.log2(chosen)
        return carry - eta * (surprise - tau)


class AdaptiveP(Stage):
    """llama.cpp's adaptive-p: the candidates re-weighted towards 2 x target - the running average of the chosen
    tokens' probabilities (as this stage received them); the average starts at the target and, once a token is
    drawn, becomes decay x average + (1 - decay) x its probability (llama.cpp's weighted sum over its total weight,
    which stays 1 / (1 - decay) from its start)."""

    needs = Needs(carry=("adaptive_p_average",))

    def args(self, spec: RunSpec, context: Context) -> Args:
        return F32(spec.adaptive_target), F32(spec.adaptive_decay)

    def initial(self, args: tuple[jax.Array, ...]) -> jax.Array:
        return args[0]

    def apply(self, cands: Candidates, view: View, static: Any, args: tuple[jax.Array, ...]) -> Candidates:
        assert view.carry is not None, "the chain hands a carrying stage its state"
        adapted = stage_math.adaptive_target(args[0], view.carry)  # (B, 1)
        return cands._replace(values=stage_math.adaptive_p(cands.values, adapted))

    def observed(self, before: Candidates, after: Candidates) -> Candidates:
        return before._replace(values=jax.nn.softmax(before.values, axis=-1))

    def settled(self, carry: jax.Array, chosen: jax.Array, args: tuple[jax.Array, ...]) -> jax.Array:
        decay = args[1]
        return decay * carry + (1.0 - decay) * chosen

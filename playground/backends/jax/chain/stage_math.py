"""Logits stages beyond top-k/top-p/min-p (typical, epsilon, eta, top-nσ, XTC, DRY, no-repeat n-grams, top-a, p-less,
dynamic temperature, mirostat v2, adaptive-p), inside jit.

Every numeric argument that is not marked static is a traced scalar, so a new value never recompiles: the
stages branch with jnp.where, never with Python `if`. `values` is (B, N) float32 logits of a candidate set in
any order (the whole vocabulary or a subset such as top-k's), removed entries -inf; a filter returns it with the
entries it removes set to -inf and the rest untouched, as transformers' warpers (min_tokens_to_keep=1) do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

DRY_MAX_MATCH = 50  # text-generation-webui caps a DRY match here, so base ** (match - allowed) cannot overflow


def _drop(values: jax.Array, remove: jax.Array) -> jax.Array:
    return jnp.where(remove, -jnp.inf, values)


def protected(remove: jax.Array, ranking: jax.Array, keep: int) -> jax.Array:
    """transformers' min_tokens_to_keep: the `keep` entries ranked highest by `ranking` (B, N) are never removed
    (keep is static; 1 leaves `remove` as it is, each filter already keeping its best)."""
    if keep <= 1:
        return remove
    best = jax.lax.top_k(ranking, min(keep, ranking.shape[-1]))[1]  # (B, keep)
    return remove.at[jnp.arange(remove.shape[0])[:, None], best].set(False)


def typical(values: jax.Array, mass: jax.Array, keep: int = 1) -> jax.Array:
    """TypicalLogitsWarper: keep the tokens whose surprisal is closest to the entropy until they hold `mass`.

    Ranked by |-log p - entropy| ascending, as transformers sorts them, because the cumulative mass depends on
    that order; the cutoff is the score of the first token where the mass reaches `mass`, and every token
    scoring above it goes (so the best-ranked token always stays). -inf entries score +inf and rank last;
    their 0 * -inf terms are left out of the entropy (transformers' nansum). mass >= 1 leaves the row alone.
    """
    log_p = jax.nn.log_softmax(values, axis=-1)  # (B, N)
    entropy = -jnp.nansum(log_p * jnp.exp(log_p), axis=-1, keepdims=True)  # (B, 1)
    score = jnp.abs(-log_p - entropy)  # (B, N)
    sorted_score, sorted_values = jax.lax.sort((score, values), dimension=-1, num_keys=1)  # (B, N) each
    cumulative = jnp.cumsum(jax.nn.softmax(sorted_values, axis=-1), axis=-1)  # (B, N)
    last = jnp.minimum(jnp.sum(cumulative < mass, axis=-1, keepdims=True), values.shape[-1] - 1)  # (B, 1)
    cutoff = jnp.take_along_axis(sorted_score, last, axis=-1)  # (B, 1)
    return _drop(values, protected((score > cutoff) & (mass < 1), -score, keep))  # the `keep` most typical stay


def _below(values: jax.Array, probs: jax.Array, cutoff: jax.Array, keep: int) -> jax.Array:
    """Epsilon and eta's removal: probability under `cutoff`, except the most likely token(s) (the `keep` most
    likely), which always stay."""
    remove = (probs < cutoff) & (values < jnp.max(values, axis=-1, keepdims=True))
    return _drop(values, protected(remove, values, keep))


def epsilon(values: jax.Array, epsilon: jax.Array, keep: int = 1) -> jax.Array:
    """EpsilonLogitsWarper: drop tokens with probability below `epsilon`."""
    return _below(values, jax.nn.softmax(values, axis=-1), epsilon, keep)


def eta(values: jax.Array, eta: jax.Array, keep: int = 1) -> jax.Array:
    """EtaLogitsWarper: drop tokens with probability below min(eta, sqrt(eta) * exp(-entropy)).

    The entropy is computed as torch's Categorical.entropy does (normalized logits clamped to the dtype's
    minimum, so -inf entries add 0), to land on the same cutoff.
    """
    probs = jax.nn.softmax(values, axis=-1)  # (B, N)
    normalized = values - jax.nn.logsumexp(values, axis=-1, keepdims=True)  # (B, N)
    normalized = jnp.maximum(normalized, jnp.finfo(values.dtype).min)
    entropy = -jnp.sum(normalized * probs, axis=-1, keepdims=True)  # (B, 1)
    return _below(values, probs, jnp.minimum(eta, jnp.sqrt(eta) * jnp.exp(-entropy)), keep)


def top_n_sigma(values: jax.Array, n: jax.Array) -> jax.Array:
    """llama.cpp's top-nσ: drop logits more than n population standard deviations below the best one.

    The statistics cover the finite entries only, as llama.cpp skips -inf ones; n <= 0 turns it off there, and
    here too.
    """
    finite = values != -jnp.inf  # (B, N)
    count = jnp.maximum(jnp.sum(finite, axis=-1, keepdims=True), 1)  # (B, 1)
    mean = jnp.sum(jnp.where(finite, values, 0.0), axis=-1, keepdims=True) / count  # (B, 1)
    spread = jnp.where(finite, (values - mean) ** 2, 0.0)  # (B, N)
    std = jnp.sqrt(jnp.sum(spread, axis=-1, keepdims=True) / count)  # (B, 1)
    best = jnp.max(values, axis=-1, keepdims=True)  # (B, 1)
    return _drop(values, (values < best - n * std) & (n > 0))


def xtc(values: jax.Array, threshold: jax.Array, probability: jax.Array, key: jax.Array) -> jax.Array:
    """llama.cpp's XTC (exclude top choices): with chance `probability`, drop every token at or above
    `threshold` except the least likely of them, when at least two are there.

    One coin per call, shared by the rows, as llama.cpp draws one per sampling step. Ties for least likely
    go to the highest position, which is the one a stable descending sort puts last (llama.cpp cuts its
    sorted list there).
    """
    coin = jax.random.uniform(key, ())
    probs = jax.nn.softmax(values, axis=-1)  # (B, N)
    above = probs >= threshold  # (B, N)
    least = jnp.min(jnp.where(above, probs, jnp.inf), axis=-1, keepdims=True)  # (B, 1)
    position = jnp.arange(values.shape[-1])  # (N,)
    kept = jnp.max(jnp.where(above & (probs == least), position, -1), axis=-1, keepdims=True)  # (B, 1)
    several = jnp.sum(above, axis=-1, keepdims=True) >= 2  # (B, 1)
    on = (coin <= probability) & (probability > 0)
    return _drop(values, above & (position != kept) & several & on)


def top_a(values: jax.Array, a: jax.Array, keep: int = 1) -> jax.Array:
    """text-generation-webui's TopALogitsWarper: drop tokens with probability below a x (the best probability)²."""
    probs = jax.nn.softmax(values, axis=-1)  # (B, N)
    best = jnp.max(probs, axis=-1, keepdims=True)  # (B, 1)
    return _drop(values, protected(probs < a * best * best, values, keep))


def p_less(values: jax.Array, mode: jax.Array) -> jax.Array:
    """p-less (mode 1): drop tokens with probability below Σp²; p-less-norm (mode 2): below (N·Σp² - 1) / (N - 1),
    N being the tokens still in the set (the whole vocabulary when nothing was removed before). Σp² <= max p, so
    the best token always stays (also where rounding puts a uniform row's Σp² a hair above its p); a set of one
    token is left alone."""
    probs = jax.nn.softmax(values, axis=-1)  # (B, N)
    square = jnp.sum(probs * probs, axis=-1, keepdims=True)  # (B, 1)
    count = jnp.sum(jnp.isfinite(values), axis=-1, keepdims=True).astype(jnp.float32)  # (B, 1)
    normalised = (count * square - 1.0) / jnp.maximum(count - 1.0, 1.0)  # (B, 1)
    threshold = jnp.where(mode == 2, jnp.where(count > 1, normalised, 0.0), square)  # (B, 1)
    return _drop(values, (probs < threshold) & (values < jnp.max(values, axis=-1, keepdims=True)))


def keep_best(values: jax.Array) -> jax.Array:
    """A temperature of 0, as llama.cpp reads it: the best logit(s) of each row stay as they are, the rest go."""
    return jnp.where(values == jnp.max(values, axis=-1, keepdims=True), values, -jnp.inf)


def entropy_temperature(values: jax.Array, base: jax.Array, spread: jax.Array, exponent: jax.Array) -> jax.Array:
    """(B, 1): llama.cpp's temp-ext temperature, from base - spread (not below 0) to base + spread as the
    candidates' entropy over its largest possible value, ln(N), goes from 0 to 1, raised to `exponent`."""
    log_p = jax.nn.log_softmax(values, axis=-1)  # (B, N)
    entropy = -jnp.sum(jnp.where(jnp.isfinite(values), jnp.exp(log_p) * log_p, 0.0), axis=-1, keepdims=True)
    count = jnp.sum(jnp.isfinite(values), axis=-1, keepdims=True).astype(jnp.float32)  # (B, 1)
    normalised = entropy / jnp.log(jnp.maximum(count, 2.0))  # (B, 1)
    low = jnp.maximum(base - spread, 0.0)
    return low + (base + spread - low) * jnp.power(normalised, exponent)


def dynamic_temperature(values: jax.Array, base: jax.Array, spread: jax.Array, exponent: jax.Array) -> jax.Array:
    """The logits divided by their entropy_temperature. A row of one candidate is left as it is (llama.cpp returns
    before scaling); a temperature of 0 keeps only the best logit(s), as llama.cpp's temperature 0 does."""
    temperature = entropy_temperature(values, base, spread, exponent)  # (B, 1)
    single = jnp.sum(jnp.isfinite(values), axis=-1, keepdims=True) <= 1  # (B, 1)
    scaled = jnp.where(temperature > 0, values / jnp.where(temperature > 0, temperature, 1.0), keep_best(values))
    return jnp.where(single, values, scaled)


def mirostat_cut(values: jax.Array, mu: jax.Array) -> jax.Array:
    """llama.cpp's mirostat v2 truncation: drop tokens whose surprise -log2 p exceeds mu (B, 1); the most likely
    token stays when every token would go."""
    log2_p = jax.nn.log_softmax(values, axis=-1) / jnp.log(2.0)  # (B, N)
    best = values >= jnp.max(values, axis=-1, keepdims=True)
    remove = -log2_p > mu
    none_left = jnp.all(remove | ~jnp.isfinite(values), axis=-1, keepdims=True)
    return _drop(values, remove & ~(none_left & best))


ADAPTIVE_WIDTH, ADAPTIVE_PEAK, ADAPTIVE_SHARPNESS = 0.3, 5.0, 10.0  # llama.cpp's adaptive-p transform constants


def adaptive_target(target: jax.Array, average: jax.Array) -> jax.Array:
    """adaptive-p's target for this step: 2 x target - the running average of the chosen tokens' probabilities,
    clamped to [0, 1] (above-target picks lower the next target, and the other way round)."""
    return jnp.clip(2.0 * jnp.clip(target, 0.0, 1.0) - average, 0.0, 1.0)


def adaptive_p(values: jax.Array, adapted: jax.Array) -> jax.Array:
    """llama.cpp's adaptive-p transform: each candidate's new logit is 5 - 10 d² / (1 + d), d = |p - adapted| / 0.3,
    p its probability now (quadratic near the target, linear in the tails); removed entries stay -inf."""
    probs = jax.nn.softmax(values, axis=-1)  # (B, N)
    distance = jnp.abs(probs - adapted) / ADAPTIVE_WIDTH  # (B, N)
    logits = ADAPTIVE_PEAK - ADAPTIVE_SHARPNESS * distance * distance / (1.0 + distance)
    return jnp.where(jnp.isfinite(values), logits, -jnp.inf)


def _row_lengths(length: jax.Array, batch: int) -> jax.Array:
    """(B, 1) int32: one shared length, or one per row."""
    return jnp.broadcast_to(jnp.asarray(length, jnp.int32).reshape(-1), (batch,))[:, None]


def dry_penalties(ids: jax.Array, length: jax.Array, breakers: jax.Array, multiplier: jax.Array, base: jax.Array,
                  allowed_length: jax.Array, vocab_size: int) -> jax.Array:
    """(B, V) float32 to subtract from the logits: DRY, as text-generation-webui's DRYLogitsProcessor.

    A token that would extend a repeat of the context's ending is penalized by multiplier * base ** (m -
    allowed_length), m being the longest such repeat (at most DRY_MAX_MATCH, at least allowed_length). Every
    earlier occurrence i of the last token is a candidate, its match length found at once for all i by comparing
    the history shifted by k against the k-th token from the end and counting the unbroken run of agreements
    (a cumulative product over k); a scatter-max then keeps each next token's longest. Sequence breakers stop
    a match, and a breaker as the last or the next token means no penalty. ids (B, H) int32: only the first
    `length` are real; vocab_size is static.
    """
    batch, history = ids.shape
    length = _row_lengths(length, batch)  # (B, 1)
    position = jnp.arange(history)  # (H,)
    last = jnp.take_along_axis(ids, jnp.clip(length - 1, 0, history - 1), axis=1)  # (B, 1)
    back = jnp.arange(1, DRY_MAX_MATCH)  # (K,) K = DRY_MAX_MATCH - 1: how far a match extends back
    ending = jnp.take_along_axis(ids, jnp.clip(length - 1 - back, 0, history - 1), axis=1)  # (B, K)
    earlier = position[None, :] - back[:, None]  # (K, H): i - k
    shifted = ids[:, jnp.clip(earlier, 0, history - 1)]  # (B, K, H): ids[i - k]
    agree = (earlier >= 0) & (shifted == ending[:, :, None]) & ~breakers[ending][:, :, None]  # (B, K, H)
    match = 1 + jnp.sum(jnp.cumprod(agree.astype(jnp.int32), axis=1), axis=1)  # (B, H)
    following = ids[:, jnp.minimum(position + 1, history - 1)]  # (B, H): ids[i + 1]
    starts = (position[None, :] <= length - 2) & (ids == last) & ~breakers[following] & ~breakers[last]  # (B, H)
    # each start's penalty, over the H positions rather than the V tokens (a power per token was the stage's main
    # cost); the penalty grows with the match (base > 1), so a token's largest is its longest match's
    penalized = starts & (match >= allowed_length) & (multiplier != 0)  # (B, H)
    amount = multiplier * jnp.power(base, (match - allowed_length).astype(jnp.float32))  # (B, H)
    rows = jnp.arange(batch)[:, None]  # (B, 1)
    penalties = jnp.zeros((batch, vocab_size), jnp.float32)  # (B, V)
    return penalties.at[rows, jnp.where(penalized, following, vocab_size)].max(amount, mode="drop")


def banned_ngrams(ids: jax.Array, length: jax.Array, n: int, vocab_size: int) -> jax.Array:
    """(B, V) bool: NoRepeatNGramLogitsProcessor(n) over the first `length` ids, the tokens that would complete
    an n-gram already there. Each window of n whose first n - 1 tokens equal the last n - 1 ids bans its own
    last token; windows reaching past `length` do not count. n and vocab_size are static."""
    batch, history = ids.shape
    length = _row_lengths(length, batch)  # (B, 1)
    windows = history - n + 1
    if windows <= 0:
        return jnp.zeros((batch, vocab_size), bool)
    match = jnp.arange(windows)[None, :] <= length - n  # (B, W)
    for offset in range(n - 1):
        prefix = jnp.take_along_axis(ids, jnp.clip(length - n + 1 + offset, 0, history - 1), axis=1)  # (B, 1)
        match = match & (ids[:, offset:offset + windows] == prefix)  # (B, W)
    completing = ids[:, n - 1:n - 1 + windows]  # (B, W)
    rows = jnp.arange(batch)[:, None]  # (B, 1)
    banned = jnp.zeros((batch, vocab_size), bool)  # (B, V)
    return banned.at[rows, jnp.where(match, completing, vocab_size)].set(True, mode="drop")

"""JAX logits stages (playground/backends/jax/chain/stage_math.py) against transformers' processors and the references
they follow (llama.cpp's top-nσ and XTC, text-generation-webui's DRY): small hand-made rows and random ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from transformers.generation.logits_process import (  # noqa: E402
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    NoRepeatNGramLogitsProcessor,
    TypicalLogitsWarper,
)

from playground.backends.jax.chain import stage_math  # noqa: E402

B, V = 2, 50

# jitted as the decoder uses them (one compile per shape, where eager mode compiles every op of every call)
typical, epsilon, eta, top_n_sigma, xtc = (jax.jit(fn) for fn in (
    stage_math.typical, stage_math.epsilon, stage_math.eta, stage_math.top_n_sigma, stage_math.xtc))
dry_penalties = jax.jit(stage_math.dry_penalties, static_argnames="vocab_size")
banned_ngrams = jax.jit(stage_math.banned_ngrams, static_argnames=("n", "vocab_size"))


def random_rows(seed: int, scale: float, holes: bool) -> np.ndarray:
    """(B, V) float32 logits; with `holes`, about a third of each row is -inf (already removed)."""
    rng = np.random.default_rng(seed)
    rows = (rng.standard_normal((B, V)) * scale).astype(np.float32)
    if holes:
        rows[rng.random((B, V)) < 0.35] = -np.inf
        rows[:, 0] = scale  # at least one finite entry per row
    return rows


def kept(values) -> np.ndarray:
    return np.isfinite(np.asarray(values))


def torch_kept(warper, rows: np.ndarray) -> np.ndarray:
    return kept(warper(torch.zeros((rows.shape[0], 1), dtype=torch.long), torch.from_numpy(rows.copy())).numpy())


def assert_filter(out, rows: np.ndarray, expected_kept: np.ndarray) -> None:
    """Same kept set, and the kept entries untouched."""
    out = np.asarray(out)
    np.testing.assert_array_equal(kept(out), expected_kept)
    np.testing.assert_array_equal(out[expected_kept], rows[expected_kept])


CASES = [(seed, scale, holes) for seed in range(6) for scale in (0.5, 2.0, 5.0) for holes in (False, True)]
TIES = np.array([[2.0, 2.0, 1.0, 1.0, 0.0, 0.0, -np.inf, 3.0, 3.0, -1.0],
                 [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], np.float32)


FILTERS = {"typical": (typical, TypicalLogitsWarper), "epsilon": (epsilon, EpsilonLogitsWarper),
           "eta": (eta, EtaLogitsWarper)}


@pytest.mark.parametrize(("name", "value"), [("typical", m) for m in (0.2, 0.5, 0.9, 0.99)]
                         + [("epsilon", c) for c in (1e-3, 0.01, 0.05, 0.3)]
                         + [("eta", c) for c in (3e-4, 4e-3, 0.05, 0.5)])
def test_filter_matches_transformers(name: str, value: float) -> None:
    """typical-p, epsilon and eta keep what transformers' warper of the same name keeps, on random rows (some
    with removed entries) and on a row of ties."""
    ours, warper = FILTERS[name]
    for rows in [random_rows(seed, scale, holes) for seed, scale, holes in CASES] + [TIES]:
        out = ours(jnp.asarray(rows), jnp.float32(value))
        assert_filter(out, rows, torch_kept(warper(value), rows))


def test_typical_leaves_the_row_alone_at_mass_one() -> None:
    rows = random_rows(0, 2.0, True)
    for mass in (1.0, 1.5):
        np.testing.assert_array_equal(np.asarray(typical(jnp.asarray(rows), jnp.float32(mass))), rows)


def numpy_top_n_sigma(rows: np.ndarray, n: float) -> np.ndarray:
    out = rows.copy()
    for row in out:
        finite = row[np.isfinite(row)]
        row[row < finite.max() - n * finite.std()] = -np.inf  # np.std: population (ddof=0)
    return out


@pytest.mark.parametrize("n", [0.5, 1.0, 2.0])
def test_top_n_sigma_matches_numpy(n: float) -> None:
    for seed, scale, holes in CASES:
        rows = random_rows(seed, scale, holes)
        out = top_n_sigma(jnp.asarray(rows), jnp.float32(n))
        assert_filter(out, rows, kept(numpy_top_n_sigma(rows, n)))


def test_top_n_sigma_off_at_zero() -> None:
    """llama.cpp returns early for n <= 0."""
    rows = random_rows(1, 2.0, True)
    np.testing.assert_array_equal(np.asarray(top_n_sigma(jnp.asarray(rows), jnp.float32(0.0))), rows)


def torch_xtc(rows: np.ndarray, threshold: float) -> np.ndarray:
    """llama.cpp's cut on a stable descending sort: drop everything ranked before the last token >= threshold."""
    scores = torch.from_numpy(rows.copy())
    probs, order = torch.sort(scores.softmax(dim=-1), descending=True, stable=True)
    for row in range(scores.shape[0]):
        above = int((probs[row] >= threshold).sum())
        if above >= 2:
            scores[row, order[row, :above - 1]] = -torch.inf
    return scores.numpy()


def test_xtc_keeps_the_least_likely_of_the_top() -> None:
    rows = np.log(np.array([[0.3, 0.25, 0.2, 0.15, 0.1]], np.float32))
    key = jax.random.key(0)
    out = np.asarray(xtc(jnp.asarray(rows), jnp.float32(0.18), jnp.float32(1.0), key))
    assert_filter(out, rows, np.array([[False, False, True, True, True]]))
    # one token above the threshold: nothing to exclude
    out = np.asarray(xtc(jnp.asarray(rows), jnp.float32(0.28), jnp.float32(1.0), key))
    np.testing.assert_array_equal(out, rows)
    # the coin says no
    out = np.asarray(xtc(jnp.asarray(rows), jnp.float32(0.18), jnp.float32(0.0), key))
    np.testing.assert_array_equal(out, rows)


def test_xtc_ties_go_to_the_last_in_stable_order() -> None:
    rows = np.array([[0.0, 1.0, 1.0, -5.0], [1.0, 1.0, 1.0, 1.0]], np.float32)
    out = np.asarray(xtc(jnp.asarray(rows), jnp.float32(0.2), jnp.float32(1.0), jax.random.key(3)))
    assert_filter(out, rows, np.array([[True, False, True, True], [False, False, False, True]]))
    assert_filter(out, rows, kept(torch_xtc(rows, 0.2)))


@pytest.mark.parametrize("threshold", [0.02, 0.05, 0.1, 0.3])
def test_xtc_matches_the_reference(threshold: float) -> None:
    for seed, scale, holes in CASES:
        rows = random_rows(seed, scale, holes)
        out = xtc(jnp.asarray(rows), jnp.float32(threshold), jnp.float32(1.0), jax.random.key(seed))
        assert_filter(out, rows, kept(torch_xtc(rows, threshold)))


def test_xtc_coin_is_per_key_and_reproducible() -> None:
    rows = np.log(np.array([[0.3, 0.25, 0.2, 0.15, 0.1], [0.4, 0.3, 0.1, 0.1, 0.1]], np.float32))
    fired = []
    for seed in range(40):
        key = jax.random.key(seed)
        out = np.asarray(xtc(jnp.asarray(rows), jnp.float32(0.18), jnp.float32(0.5), key))
        again = np.asarray(xtc(jnp.asarray(rows), jnp.float32(0.18), jnp.float32(0.5), key))
        np.testing.assert_array_equal(out, again)
        on = bool(jax.random.uniform(key, ()) <= 0.5)
        np.testing.assert_array_equal(kept(out), kept(torch_xtc(rows, 0.18)) if on else kept(rows))
        fired.append(on)
    assert any(fired) and not all(fired)


def python_dry(row: list[int], breakers: set[int], multiplier: float, base: float, allowed: int,
               vocab: int) -> np.ndarray:
    """text-generation-webui's DRYLogitsProcessor on one history, as amounts to subtract."""
    penalty = np.zeros(vocab)
    last = row[-1]
    if last in breakers:
        return penalty
    best: dict[int, int] = {}
    for i in range(len(row) - 1):
        if row[i] != last:
            continue
        following = row[i + 1]
        if following in breakers:
            continue
        match = 1
        while match < 50:
            j = i - match
            if j < 0:
                break
            previous = row[-(match + 1)]
            if row[j] != previous or previous in breakers:
                break
            match += 1
        best[following] = max(best.get(following, 0), match)
    for token, match in best.items():
        if match >= allowed:
            penalty[token] = multiplier * base ** (match - allowed)
    return penalty


def dry(ids: np.ndarray, length, breakers: np.ndarray, multiplier: float, base: float, allowed: int) -> np.ndarray:
    out = dry_penalties(jnp.asarray(ids, jnp.int32), jnp.asarray(length, jnp.int32), jnp.asarray(breakers),
                                 jnp.float32(multiplier), jnp.float32(base), jnp.int32(allowed),
                                 vocab_size=breakers.shape[0])
    assert out.shape == (ids.shape[0], breakers.shape[0]) and out.dtype == jnp.float32
    return np.asarray(out)


@pytest.mark.parametrize("allowed", [0, 1, 2, 4])
def test_dry_matches_the_reference(allowed: int) -> None:
    vocab, history = 6, 48
    rng = np.random.default_rng(allowed)
    for trial in range(30):
        ids = rng.integers(0, vocab if trial % 2 else 3, (3, history))  # tokens 0-2 only: long repeats
        if trial % 3 == 0:
            ids[:, ::7] = 1
        breakers = np.zeros(vocab, bool)
        breakers[rng.integers(0, vocab, trial % 3)] = True
        length = int(rng.integers(1, history + 1))
        out = dry(ids, length, breakers, 0.8, 1.75, allowed)
        broken = {int(t) for t in np.flatnonzero(breakers)}
        for row in range(ids.shape[0]):
            expected = python_dry(ids[row, :length].tolist(), broken, 0.8, 1.75, allowed, vocab)
            np.testing.assert_allclose(out[row], expected, rtol=1e-5, err_msg=f"trial {trial} row {row}")


def test_dry_per_row_lengths_ignore_padding() -> None:
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 3, (4, 40))
    lengths = np.array([1, 9, 25, 40])
    breakers = np.array([False, False, False, True])
    out = dry(ids, lengths, breakers, 1.0, 2.0, 2)
    for row, length in enumerate(lengths):
        expected = python_dry(ids[row, :length].tolist(), {3}, 1.0, 2.0, 2, 4)
        np.testing.assert_allclose(out[row], expected, rtol=1e-5)


def test_dry_caps_the_match_at_50() -> None:
    ids = np.full((1, 120), 1)
    out = dry(ids, 120, np.zeros(3, bool), 0.5, 1.5, 2)
    np.testing.assert_allclose(out[0], [0.0, 0.5 * 1.5 ** 48, 0.0], rtol=1e-5)


def test_dry_multiplier_zero_is_off() -> None:
    ids = np.full((2, 30), 2)
    np.testing.assert_array_equal(dry(ids, 30, np.zeros(4, bool), 0.0, 1.75, 2), np.zeros((2, 4)))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_banned_ngrams_match_transformers(n: int) -> None:
    vocab, history = 6, 30
    rng = np.random.default_rng(n)
    for trial in range(25):
        ids = rng.integers(0, vocab if trial % 2 else 3, (3, history))
        length = int(rng.integers(0, history + 1)) if trial else n - 1  # the first: too short for an n-gram
        out = banned_ngrams(jnp.asarray(ids, jnp.int32), jnp.int32(length), n=n, vocab_size=vocab)
        scores = NoRepeatNGramLogitsProcessor(n)(torch.from_numpy(ids[:, :length]), torch.zeros((3, vocab)))
        np.testing.assert_array_equal(np.asarray(out), torch.isneginf(scores).numpy(), err_msg=f"trial {trial}")


def test_stages_trace_once_for_any_scalar_values() -> None:
    """Every scalar is traced: a second call with other values reuses the first compile."""
    traces: dict[str, int] = {}

    def counted(name: str, fn):
        def wrapper(*args, **kwargs):
            traces[name] = traces.get(name, 0) + 1
            return fn(*args, **kwargs)
        return wrapper

    rows = jnp.asarray(random_rows(0, 2.0, True))
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 5, (2, 24)), jnp.int32)
    breakers = jnp.zeros(5, bool).at[0].set(True)
    calls = {
        "typical": (stage_math.typical, (), lambda s: (rows, jnp.float32(0.5 + s / 4))),
        "epsilon": (stage_math.epsilon, (), lambda s: (rows, jnp.float32(0.01 * (1 + s)))),
        "eta": (stage_math.eta, (), lambda s: (rows, jnp.float32(0.01 * (1 + s)))),
        "top_n_sigma": (stage_math.top_n_sigma, (), lambda s: (rows, jnp.float32(1 + s))),
        "xtc": (stage_math.xtc, (), lambda s: (rows, jnp.float32(0.05 + s / 10), jnp.float32(1 - s / 2),
                                              jax.random.key(s))),
        "dry_penalties": (stage_math.dry_penalties, ("vocab_size",),
                          lambda s: (ids, jnp.int32(20 + s), breakers, jnp.float32(0.8 + s), jnp.float32(1.75 + s),
                                     jnp.int32(2 + s))),
        "banned_ngrams": (stage_math.banned_ngrams, ("n", "vocab_size"), lambda s: (ids, jnp.int32(20 + s))),
    }
    statics = {"vocab_size": 5, "n": 2}
    for name, (fn, static, args) in calls.items():
        jitted = jax.jit(counted(name, fn), static_argnames=static)
        for s in (0, 1):
            jax.block_until_ready(jitted(*args(s), **{k: statics[k] for k in static}))
        assert traces[name] == 1, name

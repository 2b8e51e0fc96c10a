"""The samplers that arrived after ours (top-a, p-less, dynamic temperature, mirostat v2, adaptive-p) on both
backends, against references written here from their sources' definitions (docs/stage_math.md names them):
text-generation-webui's TopALogitsWarper, the p-less authors' p_less_decode / p_less_norm_decode, llama.cpp's
llama_sampler_temp_ext_apply, llama_sampler_mirostat_v2_apply and llama_sampler_adaptive_p_apply / _accept. The
references work as their sources do, on a candidate list sorted by probability with removed entries left out."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

from playground.backends.jax.chain import stage_math  # noqa: E402
from playground.backends.jax.chain.chain import Context, settle, start_history  # noqa: E402
from playground.backends.jax.chain.token_choice import mode_for, processed  # noqa: E402
from playground.backends.torch.carrying import AdaptivePLogitsWarper, MirostatV2LogitsWarper  # noqa: E402
from playground.backends.torch.samplers import (  # noqa: E402
    DynamicTemperatureLogitsWarper,
    PLessLogitsWarper,
    TopALogitsWarper,
)
from playground.errors import PlaygroundError  # noqa: E402
from playground.spec import RunSpec  # noqa: E402

B, V = 2, 40
NO_IDS = torch.zeros((B, 1), dtype=torch.long)


def random_rows(seed: int, scale: float, holes: bool) -> np.ndarray:
    """(B, V) float32 logits; with `holes`, about a third of each row is -inf (removed by an earlier stage)."""
    rng = np.random.default_rng(seed)
    rows = (rng.standard_normal((B, V)) * scale).astype(np.float32)
    if holes:
        rows[rng.random((B, V)) < 0.35] = -np.inf
        rows[:, 0] = scale
    return rows


CASES = [random_rows(seed, scale, holes) for seed in range(5) for scale in (0.3, 1.5, 4.0) for holes in (False, True)]


def candidates(row: np.ndarray) -> list[tuple[int, float]]:
    """A row as its sources hold it: (id, probability) of the finite entries, most likely first."""
    finite = np.isfinite(row)
    probs = np.zeros(row.shape, np.float64)
    shifted = np.exp(row[finite].astype(np.float64) - row[finite].max())
    probs[finite] = shifted / shifted.sum()
    return sorted(((int(i), float(probs[i])) for i in np.nonzero(finite)[0]), key=lambda c: -c[1])


def kept_ids(row: np.ndarray) -> set[int]:
    return {int(i) for i in np.nonzero(np.isfinite(row))[0]}


# -- references ----------------------------------------------------------------------------------------------------

def reference_top_a(row: np.ndarray, a: float) -> set[int]:
    """TopALogitsWarper: remove probs < probs_max² x top_a."""
    cands = candidates(row)
    best = cands[0][1]
    return {i for i, p in cands if not p < best * best * a}


def reference_p_less(row: np.ndarray, norm: bool) -> set[int]:
    """p_less_decode: remove probs < Σp²; p_less_norm_decode: < (v·Σp² - 1) / (v - 1), v the candidates."""
    cands = candidates(row)
    square = sum(p * p for _, p in cands)
    v = len(cands)
    threshold = ((v * square - 1.0) / (v - 1.0) if v > 1 else 0.0) if norm else square
    return {i for i, p in cands if not p < threshold}


def reference_dynatemp(row: np.ndarray, temp: float, delta: float, exponent: float) -> np.ndarray:
    """llama_sampler_temp_ext_apply: entropy of the candidates over -log(1 / size), mapped into
    [max(0, temp - delta), temp + delta] by the power function; size <= 1 returns before scaling."""
    cands = candidates(row)
    if len(cands) <= 1:
        return row.astype(np.float64)
    min_temp, max_temp = max(0.0, temp - delta), temp + delta
    entropy = -sum(p * math.log(p) for _, p in cands if p > 0)
    dyn_temp = min_temp + (max_temp - min_temp) * (entropy / -math.log(1.0 / len(cands))) ** exponent
    return row.astype(np.float64) / dyn_temp


def reference_mirostat_v2(rows: list[np.ndarray], ranks: list[int], tau: float, eta: float
                          ) -> tuple[list[set[int]], list[float], list[int]]:
    """llama_sampler_mirostat_v2_apply over several steps, the drawn token given as its rank among those kept:
    per step the kept ids, the μ it truncated with (μ starts at 2τ; a token's surprise is read from the
    renormalised kept list) and the token drawn."""
    mu, kept, mus, chosen = 2.0 * tau, [], [], []
    for row, rank in zip(rows, ranks, strict=True):
        cands = candidates(row)
        size = next((i for i, (_, p) in enumerate(cands) if -math.log2(p) > mu), len(cands)) or 1
        cands = cands[:size]
        token = cands[min(rank, size - 1)][0]
        chosen.append(token)
        total = sum(p for _, p in cands)
        observed = -math.log2(dict(cands)[token] / total)
        kept.append({i for i, _ in cands})
        mus.append(mu)
        mu = mu - eta * (observed - tau)
    return kept, mus, chosen


def reference_adaptive_p(rows: list[np.ndarray], chosen: list[int], target: float, decay: float
                         ) -> tuple[list[np.ndarray], list[float]]:
    """llama_sampler_adaptive_p_apply and _accept: per step the transformed logits (-inf kept) and the running
    average weighted_sum / total_weight it adapted the target with."""
    weighted_sum, total_weight = target / (1.0 - decay), 1.0 / (1.0 - decay)
    outs, averages = [], []
    for row, token in zip(rows, chosen, strict=True):
        original = dict(candidates(row))
        adapted = min(max(2.0 * target - weighted_sum / total_weight, 0.0), 1.0)
        out = np.full(row.shape, -np.inf)
        for i, p in original.items():
            dist = abs((p - adapted) / 0.3)
            out[i] = 5.0 - 10.0 * dist * dist / (1.0 + dist)
        outs.append(out)
        averages.append(weighted_sum / total_weight)
        weighted_sum = original[token] + decay * weighted_sum
        total_weight = 1.0 + decay * total_weight
    return outs, averages


# -- the filters and dynamic temperature, each backend against its reference ------------------------------------

def torch_out(processor, rows: np.ndarray) -> np.ndarray:
    return processor(NO_IDS, torch.from_numpy(rows.copy())).numpy()


@pytest.mark.parametrize("a", [0.05, 0.2, 0.6, 1.0])
def test_top_a_keeps_what_text_generation_webui_keeps(a):
    for rows in CASES:
        ours = np.asarray(jax.jit(stage_math.top_a)(jnp.asarray(rows), jnp.float32(a)))
        theirs = torch_out(TopALogitsWarper(a), rows)
        for row, jax_row, torch_row in zip(rows, ours, theirs, strict=True):
            assert kept_ids(jax_row) == kept_ids(torch_row) == reference_top_a(row, a)
            np.testing.assert_array_equal(jax_row[np.isfinite(jax_row)], row[np.isfinite(jax_row)])


@pytest.mark.parametrize("mode", [1, 2])
def test_p_less_keeps_what_the_authors_code_keeps(mode):
    for rows in CASES:
        ours = np.asarray(jax.jit(stage_math.p_less)(jnp.asarray(rows), jnp.int32(mode)))
        theirs = torch_out(PLessLogitsWarper(mode), rows)
        for row, jax_row, torch_row in zip(rows, ours, theirs, strict=True):
            assert kept_ids(jax_row) == kept_ids(torch_row) == reference_p_less(row, mode == 2)
            assert int(np.argmax(row)) in kept_ids(jax_row)  # Σp² <= max p: the best always stays


@pytest.mark.parametrize(("temp", "delta", "exponent"), [(1.0, 0.5, 1.0), (0.8, 0.6, 2.0), (1.5, 1.0, 0.5)])
def test_dynamic_temperature_scales_as_llama_cpp(temp, delta, exponent):
    for rows in CASES:
        args = (jnp.float32(temp), jnp.float32(delta), jnp.float32(exponent))
        ours = np.asarray(jax.jit(stage_math.dynamic_temperature)(jnp.asarray(rows), *args))
        theirs = torch_out(DynamicTemperatureLogitsWarper(temp, delta, exponent), rows)
        for row, jax_row, torch_row in zip(rows, ours, theirs, strict=True):
            expected = reference_dynatemp(row, temp, delta, exponent)
            np.testing.assert_allclose(jax_row, expected, rtol=2e-5, atol=2e-5)
            np.testing.assert_allclose(torch_row, expected, rtol=2e-5, atol=2e-5)


def test_dynamic_temperature_leaves_a_single_candidate_alone_and_follows_the_entropy():
    single = np.full((1, 6), -np.inf, np.float32)
    single[0, 2] = 3.0
    np.testing.assert_array_equal(np.asarray(stage_math.dynamic_temperature(jnp.asarray(single), 1.0, 0.5, 1.0)),
                                  single)
    flat, peaked = np.zeros((1, 8), np.float32), np.array([[6.0] + [0.0] * 7], np.float32)
    hot = stage_math.entropy_temperature(jnp.asarray(flat), 1.0, 0.5, 1.0)
    cool = stage_math.entropy_temperature(jnp.asarray(peaked), 1.0, 0.5, 1.0)
    assert float(hot[0, 0]) == pytest.approx(1.5) and 0.5 < float(cool[0, 0]) < 1.0


# -- the two that carry a state, over several steps --------------------------------------------------------------

def steps_and_tokens(seed: int, count: int = 6) -> tuple[list[np.ndarray], list[int]]:
    """Rows of one sequence (1, V) and, for each, a token to draw: the most likely one or a later one."""
    rng = np.random.default_rng(seed)
    rows = [(rng.standard_normal((1, V)) * rng.choice([0.5, 2.0, 4.0])).astype(np.float32) for _ in range(count)]
    tokens = [int(np.argsort(-row[0])[rng.integers(0, 2)]) for row in rows]
    return rows, tokens


def jax_steps(spec: RunSpec, rows: list[np.ndarray], tokens: list[int]) -> tuple[list[np.ndarray], list[float]]:
    """The JAX chain step by step on one sequence, the given tokens drawn: the final logits and state per step."""
    mode, knobs = mode_for(spec, Context(V, (), None), samples=True)
    history = start_history(jnp.zeros((1, 1), jnp.int32), jnp.int32(1), mode.needs, V)
    outs, states = [], []
    for produced, (row, token) in enumerate(zip(rows, tokens, strict=True)):
        out = processed(jnp.asarray(row), history, jnp.int32(produced), None, mode, knobs)
        outs.append(np.asarray(out.applied.cands.values[0]))
        states.append(float(out.applied.carried[0, 0]))
        carry = settle(mode.chain, knobs, out.applied, jnp.asarray([token], jnp.int32))
        history = history._replace(carry=carry)
    return outs, states


def torch_steps(processor, rows: list[np.ndarray], tokens: list[int]) -> tuple[list[np.ndarray], list[float]]:
    """The torch processor over the same steps: each call sees the previous token as the last input id."""
    outs, states, ids = [], [], [0]
    for row, token in zip(rows, tokens, strict=True):
        outs.append(processor(torch.tensor([ids]), torch.from_numpy(row.copy())).numpy()[0])
        states.append(next(iter(processor.carried().values())))
        ids.append(token)
    return outs, states


@pytest.mark.parametrize(("tau", "eta", "seed"), [(3.0, 0.1, 0), (1.5, 0.3, 1), (5.0, 0.5, 2)])
def test_mirostat_v2_cuts_and_moves_mu_as_llama_cpp(tau, eta, seed):
    rows, _ = steps_and_tokens(seed)
    ranks = [step % 3 for step in range(len(rows))]  # the best kept token, the runner-up, the third
    kept, mus, tokens = reference_mirostat_v2([row[0] for row in rows], ranks, tau, eta)
    spec = RunSpec(strategy="sampling", top_k=0, mirostat_tau=tau, mirostat_eta=eta)
    jax_outs, jax_mus = jax_steps(spec, rows, tokens)
    torch_outs, torch_mus = torch_steps(MirostatV2LogitsWarper(tau, eta), rows, tokens)
    for step in range(len(rows)):
        assert kept_ids(jax_outs[step]) == kept_ids(torch_outs[step]) == kept[step], step
    np.testing.assert_allclose(jax_mus, mus, atol=1e-5)
    np.testing.assert_allclose(torch_mus, mus, atol=1e-5)
    assert len(set(np.round(mus, 4))) > 1  # μ moved


@pytest.mark.parametrize(("target", "decay", "seed"), [(0.5, 0.9, 0), (0.3, 0.5, 1), (0.8, 0.0, 2)])
def test_adaptive_p_transforms_and_averages_as_llama_cpp(target, decay, seed):
    rows, tokens = steps_and_tokens(seed)
    for row in rows:  # an earlier stage removed some entries: they stay removed
        row[0, 5:9] = -np.inf
    tokens = [token if token not in range(5, 9) else int(np.argmax(row[0])) for token, row in zip(tokens, rows,
                                                                                                   strict=True)]
    outs, averages = reference_adaptive_p([row[0] for row in rows], tokens, target, decay)
    spec = RunSpec(strategy="sampling", top_k=0, adaptive_target=target, adaptive_decay=decay)
    jax_outs, jax_averages = jax_steps(spec, rows, tokens)
    torch_outs, torch_averages = torch_steps(AdaptivePLogitsWarper(target, decay), rows, tokens)
    for step in range(len(rows)):
        np.testing.assert_allclose(jax_outs[step], outs[step], atol=5e-5)
        np.testing.assert_allclose(torch_outs[step], outs[step], atol=5e-5)
    np.testing.assert_allclose(jax_averages, averages, atol=1e-5)
    np.testing.assert_allclose(torch_averages, averages, atol=1e-5)


@pytest.mark.parametrize("knob", ["mirostat_tau", "adaptive_target"])
@pytest.mark.parametrize("strategy", ["beam_sample", "assisted"])
def test_a_stage_with_state_runs_on_one_drawn_sequence_only(knob, strategy):
    extra = {"prompt_lookup": 2, "assisted_sampling": True} if strategy == "assisted" else {}
    with pytest.raises(PlaygroundError, match=rf"{knob}=0.5: .*strategy=sampling only, not {strategy}"):
        RunSpec.from_dict({"strategy": strategy, knob: 0.5, **extra})
    assert RunSpec(strategy="sampling", **{knob: 0.5}).strategy == "sampling"


@pytest.fixture
def local_model(tmp_path, monkeypatch):
    from tests.helpers import allowed_tiny_model

    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        yield path


def test_each_token_record_shows_mu_and_mu_follows_the_drawn_tokens_on_both_backends(local_model):
    """A sampling run with mirostat last in the chain: μ starts at 2τ and, token after token, moves by
    -η x (-log2 p - τ), p being the drawn token's probability (the chain's last stage's distribution)."""
    from playground import runner

    tau, eta = 2.0, 0.5
    spec = RunSpec(model=local_model, strategy="sampling", top_k=0, temperature=0.5, max_new_tokens=8,
                   mirostat_tau=tau, mirostat_eta=eta, seed=3)
    for backend in ("torch", "jax"):
        result = runner.run_to_result("the state of a stage", spec.replace(backend=backend))
        mus = [record["state"]["mirostat_mu"] for record in result["tokens"]]
        assert mus[0] == pytest.approx(2 * tau)
        for step in range(1, len(mus)):
            surprise = -math.log2(result["tokens"][step - 1]["p"])
            assert mus[step] == pytest.approx(mus[step - 1] - eta * (surprise - tau), abs=1e-3), (backend, step)
        assert len(set(round(mu, 3) for mu in mus)) > 2, backend


def test_the_column_card_disables_a_stage_with_state_where_it_cannot_run_and_says_why():
    from playground.ui.columns import stage_knob_states

    for strategy in ("beam_sample", "assisted"):
        usable, info = stage_knob_states(strategy)["adaptive_target"]
        assert not usable and f"off with {strategy}: it carries its state" in info
    assert stage_knob_states("sampling")["mirostat_tau"][0]


def test_the_new_knobs_are_sweepable_and_in_the_cut_labels():
    from playground.sweep.knobs import parse_values, sweepable
    from playground.ui import cut

    for knob in ("dynatemp_range", "dynatemp_exponent", "top_a", "p_less", "mirostat_tau", "mirostat_eta",
                 "adaptive_target", "adaptive_decay"):
        assert knob in sweepable(), knob
    assert parse_values("p_less", "0,1,2") == (0, 1, 2)
    labels = cut.filter_labels({"mirostat_tau": 3.0, "top_a": 0.2, "strategy": "sampling"})
    assert labels["mirostat"] == "mirostat v2 (τ 3.0, η 0.1)" and labels["top_a"] == "top-a (0.2 × the best²)"

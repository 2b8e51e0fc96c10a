"""The registry's worked proof: a cache type and a strategy registered from this file alone (nothing under
playground/ edited) run through the runner on both backends and show up on the page.

The toy cache, "last-24", keeps the last 24 tokens of every layer: a sliding window whose size is not a knob.
It reuses the sliding cache's building blocks, so its tokens must equal the built-in sliding cache's at
window 24 on each backend, and its bytes must stop growing once 24 tokens are held.

The toy strategy, "forced-first", is greedy decoding whose first new token is always FORCED: on PyTorch through
transformers' own `begin_suppress_tokens` (every other token suppressed at the first step), on JAX as the
greedy plug-in with its first token replaced on the device. So its tokens must be FORCED followed by greedy's
continuation of FORCED (RunSpec's prefix_ids), on both backends.
"""

from __future__ import annotations

import pytest

from playground import compatibility, registry, runner
from playground.registry import CacheType, Strategy
from playground.retention import CacheRow, Written
from playground.spec import RunSpec
from tests.helpers import allowed_tiny_model

WINDOW = 24


def _torch_cache(spec, model, prompt_tokens):
    from playground.backends.torch.caches.sliding import make_sliding_cache

    return make_sliding_cache(model, WINDOW)


def _jax_layout(spec, config, native, length):
    from playground.backends.jax.caches.ring import RingLayout
    from playground.models.shapes import attention_shape

    shape = attention_shape(config)
    return RingLayout(shape.kv_heads, shape.head_dim, slots=min(WINDOW, length), window=WINDOW)


def _check_model(spec, config, layer_types):
    from playground.backends.refusals import check_imposable

    check_imposable(config, layer_types)


def _retention(at: Written) -> list[CacheRow]:
    kept = WINDOW - 1  # as the sliding cache: the last W-1 stored, the new token attends over them and itself
    states = tuple("unwritten" if i >= at.n else "kept" if i >= at.n - kept else "evicted" for i in range(at.total))
    return [CacheRow(f"all {at.full} layers (last {WINDOW})", states)]


LAST_24 = CacheType(name="last-24", label="last 24 tokens", help="keeps the 24 most recent tokens of every layer",
                    impl={"torch": _torch_cache, "jax": _jax_layout},
                    no_rollback={"jax": "its ring overwrites rejected drafts"},
                    check_model=_check_model, retention=_retention)


FORCED, VOCAB = 104, 257  # "h" in the tiny models' byte vocabulary


def _forced_first_torch(spec):
    from playground.backends.torch.strategy import Generate

    class ForcedFirst(Generate):
        def configure(self, config) -> None:
            config.begin_suppress_tokens = [t for t in range(VOCAB) if t != FORCED]

    return ForcedFirst(spec)


def _forced_first_plugin(spec, draft):
    import dataclasses

    import jax.numpy as jnp

    from playground.backends.jax.strategies.plain import PlainDecoding

    class ForcedFirst(PlainDecoding):  # greedy's kernel, its start program restarting from FORCED
        def bind(self, engine, prompt_len, bucket, context):
            bound = super().bind(engine, prompt_len, bucket, context)
            greedy_start = self.kernel.start

            def start(*inputs):
                state, first = greedy_start(*inputs)
                forced = jnp.full_like(state.token, FORCED)  # (B,): the next step writes it and continues from it
                state = dataclasses.replace(state, token=forced, done=jnp.zeros_like(state.done))
                return state, first._replace(tokens=forced)

            self.kernel = dataclasses.replace(self.kernel, name="forced-first", start=start)  # programs of its own
            return bound

    return ForcedFirst(spec, samples=False)


FORCED_FIRST = Strategy(name="forced-first", label="greedy, forced first token",
                        help=f"token {FORCED} first, then the most likely token at every step",
                        impl={"torch": _forced_first_torch, "jax": _forced_first_plugin})


@pytest.fixture
def toy_strategy():
    with registry.registered(FORCED_FIRST):
        yield FORCED_FIRST


@pytest.fixture
def local_model(tmp_path, monkeypatch):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        yield path


@pytest.fixture
def toy_cache():
    with registry.registered(LAST_24):
        yield LAST_24


def test_an_unregistered_cache_is_refused_with_the_registered_names():
    with pytest.raises(Exception, match="cache 'last-24' is not one of: dynamic, static"):
        RunSpec(cache="last-24")


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_toy_cache_runs_through_the_runner_with_the_sliding_caches_tokens(toy_cache, local_model, backend):
    prompt = "a registry entry owns its behaviour"
    toy = runner.run_to_result(prompt, RunSpec(model=local_model, backend=backend, cache="last-24",
                                               max_new_tokens=40))
    sliding = runner.run_to_result(prompt, RunSpec(model=local_model, backend=backend, cache="sliding",
                                                   window=WINDOW, max_new_tokens=40))
    assert toy["new_tokens"] == 40 and toy["token_ids"] == sliding["token_ids"]
    assert toy["metrics"]["kv_cache_bytes"] == sliding["metrics"]["kv_cache_bytes"]
    trace = toy["timeline"]["kv_cache_bytes"]
    assert trace[-1] == trace[-10]  # bounded: once 24 tokens are held, no more bytes


def test_toy_cache_joins_validation_the_table_and_the_cli_choices(toy_cache):
    from playground.__main__ import build_parser

    assert RunSpec(cache="last-24").cache == "last-24"
    assert compatibility.refusal("jax", "assisted", "last-24").startswith("its ring overwrites rejected drafts")
    assert compatibility.refusal("torch", "assisted", "last-24") is None
    assert "| last-24 |" in compatibility.markdown_table().splitlines()[0] + " |"
    args = build_parser().parse_args(["run", "--prompt", "x", "--cache", "last-24"])
    assert args.cache == "last-24"


def test_toy_cache_appears_in_the_pages_dropdown_and_draws_its_strip(toy_cache):
    from playground.retention import CacheSettings, retains, retention
    from playground.ui.columns import cache_choices, visibility
    from playground.ui.wiring import build_ui

    _, page = build_ui()
    dropdown = page.columns[0].knobs["cache"]
    assert "last-24" in [value for _, value in dropdown.choices]
    assert ("last-24", "last-24") in cache_choices("torch", "greedy")
    assert not visibility("greedy", "last-24", "torch")["window_box"]  # it reads no knob
    assert retains("last-24")
    rows = retention(CacheSettings(cache="last-24"), prompt_tokens=10, new_tokens=30, step=30)
    assert rows[0].states.count("kept") == WINDOW - 1 and rows[0].states.count("evicted") == 39 - (WINDOW - 1)


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_toy_strategy_runs_through_the_runner_as_forced_token_then_greedy(toy_strategy, local_model, backend):
    prompt = "one recipe per strategy"
    spec = RunSpec(model=local_model, backend=backend, strategy="forced-first", max_new_tokens=20)
    toy = runner.run_to_result(prompt, spec)
    greedy = runner.run_to_result(prompt, spec.replace(strategy="greedy"))
    continued = runner.run_to_result(prompt, spec.replace(strategy="greedy", prefix_ids=(FORCED,),
                                                          max_new_tokens=19))
    assert greedy["token_ids"][0] != FORCED  # so forcing changes the run
    assert toy["token_ids"] == [FORCED, *continued["token_ids"]]
    assert toy["spec"]["strategy"] == "forced-first" and toy["new_tokens"] == 20


def test_toy_strategy_joins_validation_the_table_and_the_pages_dropdown(toy_strategy):
    from playground.ui.columns import relevant_keys, strategy_choices

    assert RunSpec(strategy="forced-first").strategy == "forced-first"
    assert {row["strategy"] for row in compatibility.table()} >= {"forced-first"}
    assert ("forced-first", "forced-first") in strategy_choices("jax", "dynamic")
    assert "temperature" not in relevant_keys("forced-first", "dynamic", "torch")  # it does not sample

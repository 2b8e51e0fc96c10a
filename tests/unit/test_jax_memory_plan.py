"""The JAX memory estimate counts the cache plan each strategy's plug-in decodes over: the one plan the plug-in
declares (a strategy whose plan differs from plain decoding's, as contrastive search's look-ahead position does,
is counted by its own), for every strategy with a JAX plug-in."""

import pytest

jax = pytest.importorskip("jax")

from playground import registry  # noqa: E402
from playground.backends.jax.backend import JaxBackend  # noqa: E402
from playground.backends.jax.caches import plan as cache_plan  # noqa: E402
from playground.backends.jax.chain.chain import Context  # noqa: E402
from playground.backends.jax.decoder import plugin_for  # noqa: E402
from playground.backends.jax.engine import prefill  # noqa: E402
from playground.backends.jax.engine.engine import engine_for  # noqa: E402
from playground.backends.jax.strategy import STEPS_PER_CALL  # noqa: E402
from playground.spec import RunSpec  # noqa: E402
from tests.helpers import tiny_loaded  # noqa: E402

# a prompt whose first decode chunk just fits the first growth length (128) and whose look-ahead does not
PROMPT = 128 - STEPS_PER_CALL
SETTINGS = {"beam": {"num_beams": 2}, "beam_sample": {"num_beams": 2, "temperature": 1.0},
            "diverse_beam": {"num_beams": 4, "num_beam_groups": 2}, "assisted": {"prompt_lookup": 3},
            "contrastive": {"top_k": 4, "penalty_alpha": 0.6}, "dola": {"dola_layers": "high"},
            "sampling": {"temperature": 1.0}}
NAMES = [s.name for s in registry.strategies() if s.plugin("jax") is not None]


@pytest.mark.parametrize("name", NAMES)
def test_the_memory_estimate_counts_the_plan_the_plug_in_decodes_over(name, monkeypatch):
    # the prefill's working memory, which the estimate counts where it outweighs the cache, is test_jax_prefill's
    monkeypatch.setattr(prefill, "working_bytes", lambda *args: 0)
    loaded = tiny_loaded()
    spec = RunSpec.from_dict({"strategy": name, "backend": "jax", "cache": "dynamic", "max_new_tokens": 20,
                              "chat": False, **SETTINGS.get(name, {})})
    engine, _ = engine_for(loaded.model, 1)
    bucket = cache_plan.prefill_bucket(PROMPT)
    plan, _ = plugin_for(spec).bind(engine, PROMPT, bucket, Context(engine.vocab_size, (256,), loaded.tokenizer))
    need = JaxBackend().memory_needed(loaded, spec, PROMPT, None).run
    assert need.bytes == cache_plan.peak_bytes(plan, registry.strategy(name).peak_rows(spec))[0]
    if name == "contrastive":  # its look-ahead: a call of 8 steps needs 9 positions, past the first length
        assert plan.lengths[0] > 128 and "grows" not in need.what

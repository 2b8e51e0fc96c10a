"""A prompt as long as SmolLM2's context through the JAX static cache: the chunked prefill
(backends/jax/engine/prefill.py) keeps the peak memory near the weights and the cache, not the prompt's square.
Read as the context command reads it: an untimed run first (it compiles the programs), then the peak RSS of
the second run, against the process's RSS before the JAX path ran at all."""

from __future__ import annotations

import psutil
import pytest

from playground.data.text_files import DEFAULT_TEXT
from playground.metrics import PeakRss
from playground.runner import backend_for, check_cache_fits
from playground.spec import RunSpec
from tests.helpers import bundled

NEW = 4
GIB = 2**30


@pytest.mark.slow
@pytest.mark.extended  # two 8k-token prefills; the full suite keeps the chunked prefill's parity on tiny models
@pytest.mark.timeout(3600)  # two prefills of 8188 tokens on 2 cores (one of them compiling): minutes each
def test_a_prompt_of_smollm2s_whole_context_prefills_within_weights_cache_and_a_gib():
    loaded = bundled("smollm2-135m")
    context = loaded.model.config.max_position_embeddings  # 8192
    prompt = list(loaded.tokenizer(DEFAULT_TEXT.read_text()).input_ids)[: context - NEW]
    spec = RunSpec(model="smollm2-135m", backend="jax", cache="static", max_new_tokens=NEW, min_new_tokens=NEW,
                   reuse=False)  # both runs prefill the whole prompt: the second is the one measured
    check_cache_fits(loaded, spec, len(prompt))  # within the context and the memory budget
    before = psutil.Process().memory_info().rss
    backend = backend_for("jax")
    backend.generate(loaded, prompt, spec, lambda ids: None, lambda: False)  # compiles
    with PeakRss() as rss:
        out = backend.generate(loaded, prompt, spec, lambda ids: None, lambda: False)
    assert len(out.sequences[0]) == NEW
    assert out.extra["prefill_bucket"] == context
    growth = rss.peak - before
    weights = out.weight_bytes or loaded.weight_bytes  # as the context command reads them
    allowed = weights + out.kv_cache_bytes + GIB
    print(f"peak RSS growth {growth / GIB:.2f} GiB; weights {weights / GIB:.2f} GiB + KV "
          f"{out.kv_cache_bytes / GIB:.2f} GiB + 1 GiB = {allowed / GIB:.2f} GiB")
    assert growth <= allowed

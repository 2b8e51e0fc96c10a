"""The PyTorch prefill in chunks (backends/torch/prefill.py): transformers' prefill_chunk_size where it is exact.

A chunk of 8 tokens against a 40-token prompt crosses a sliding window of 6 (narrower than a chunk) and of 16,
and Gemma3's own window of 8; the tokens and every step's probabilities are the whole prompt's, for generate()'s
own loops and for the loops of ours (contrastive search, DoLa, diverse beam search).
"""

from __future__ import annotations

import pytest
import torch

from playground.backends.torch import prefill
from playground.spec import RunSpec
from tests.helpers import tiny_gemma, tiny_llama, tiny_loaded, torch_run

PROMPT = (torch.arange(1, 41) * 7 % 250).unsqueeze(0)  # (1, 40)
NEW = 12


@pytest.fixture(scope="module")
def llama():
    return tiny_loaded("tiny-llama-torch-prefill", tiny_llama())


@pytest.fixture(scope="module")
def gemma():
    return tiny_loaded("tiny-gemma-torch-prefill", tiny_gemma(sliding_window=8))


def _run(loaded, spec: RunSpec, chunk: int, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(prefill, "CHUNK_TOKENS", chunk)
    out, _ = torch_run(loaded, PROMPT, spec)
    return out


@pytest.mark.parametrize(("model", "knobs"), [
    ("llama", {"cache": "dynamic"}),
    ("llama", {"cache": "static"}),
    ("llama", {"cache": "sliding", "window": 6}),
    ("llama", {"cache": "sliding", "window": 16}),
    ("gemma", {"cache": "sliding"}),
    ("gemma", {"cache": "static"}),
    ("llama", {"cache": "dynamic", "strategy": "beam", "num_beams": 3}),
    # the strategies with a loop of their own prefill through generate()'s prefill, chunks included
    ("llama", {"cache": "dynamic", "strategy": "contrastive", "penalty_alpha": 0.6, "top_k": 4}),
    ("llama", {"cache": "dynamic", "strategy": "dola"}),
    ("llama", {"cache": "static", "strategy": "dola", "dola_layers": "low"}),
    ("llama", {"cache": "dynamic", "strategy": "diverse_beam", "num_beams": 4, "num_beam_groups": 2}),
])
def test_chunks_give_the_whole_prompts_tokens(model, knobs, request, monkeypatch):
    loaded = request.getfixturevalue(model)
    spec = RunSpec(backend="torch", max_new_tokens=NEW, min_new_tokens=NEW, **knobs)
    whole = _run(loaded, spec, 512, monkeypatch)
    chunked = _run(loaded, spec, 8, monkeypatch)
    assert chunked.sequences == whole.sequences
    assert chunked.forward_passes == whole.forward_passes + 4  # five chunks in place of one forward
    for mine, theirs in zip(chunked.token_info or [], whole.token_info or [], strict=True):
        assert mine["p_model"] == pytest.approx(theirs["p_model"], abs=1e-5)


@pytest.mark.parametrize("knobs", [{"cache": "sink", "window": 12, "sink_tokens": 4},
                                   {"cache": "quantized", "cache_bits": 4},
                                   {"cache": "static", "torch_compile": "default"}])
def test_the_caches_a_chunk_would_change_run_the_prompt_whole(knobs):
    assert prefill.chunk_size(RunSpec(backend="torch", **knobs), 4096) is None


def test_a_prompt_within_one_chunk_runs_whole():
    assert prefill.chunk_size(RunSpec(backend="torch", cache="static"), prefill.CHUNK_TOKENS) is None
    chunk = prefill.CHUNK_TOKENS
    assert prefill.chunk_size(RunSpec(backend="torch", cache="static"), chunk + 1) == chunk


def test_the_memory_estimate_counts_the_prompts_attention_a_chunk_at_a_time(llama):
    from playground.backends.torch.backend import TorchBackend

    heads, prompt = llama.model.config.num_attention_heads, 4000
    chunked = TorchBackend().memory_needed(llama, RunSpec(backend="torch", cache="static", max_new_tokens=8), prompt,
                                           None).run
    whole = TorchBackend().memory_needed(llama, RunSpec(backend="torch", cache="sink", window=64, max_new_tokens=8),
                                         prompt, None).run
    assert chunked.bytes >= 2 * heads * 512 * prompt * 4 and "prefill's" in chunked.what
    assert whole.bytes >= 2 * heads * prompt * prompt * 4 > 4 * chunked.bytes

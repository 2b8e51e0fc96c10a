"""JAX caches on the bundled models: the PyTorch caches' tokens over several windows."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchax")
pytest.importorskip("jax")

from playground.spec import RunSpec  # noqa: E402
from tests.helpers import (  # noqa: E402
    bundled,
    encoded,
    jax_run,
    torch_run,
)

STORY = "Write a short story about a dragon who loves tea."


def both(loaded, ids: torch.Tensor, new: int, **knobs):
    values = {"model": loaded.name, "max_new_tokens": new, "min_new_tokens": new, **knobs}
    return (jax_run(loaded, ids, RunSpec(backend="jax", **values))[0],
            torch_run(loaded, ids, RunSpec(backend="torch", **values))[0])


@pytest.mark.slow
# the sink cache's SmolLM2 run is extended: its ring against PyTorch's stays in the full suite on tiny models
# (tests/unit/test_jax_caches.py), and the bundled model streams past its window in test_sink_cache.py
@pytest.mark.parametrize("knobs", [{"cache": "sliding", "window": 64},
                                   pytest.param({"cache": "sink", "window": 64, "sink_tokens": 4},
                                                marks=pytest.mark.extended)],
                         ids=["sliding", "sink"])
def test_smollm2_bounded_caches_match_pytorch_over_three_windows(knobs):
    loaded = bundled("smollm2-135m")
    ids = encoded(loaded, STORY)  # 41 tokens + 200: past the window of 64 three times
    jax_out, torch_out = both(loaded, ids, 200, **knobs)
    assert jax_out.sequences == torch_out.sequences
    assert set(jax_out.kv_trace) == {30 * 2 * 3 * 64 * 64 * 4}  # 30 layers x K/V x 3 heads x 64 slots x 64 dims


def torch_greedy_choices(model, ids: torch.Tensor, new_ids: list[int]) -> list[int]:
    """PyTorch's greedy pick after the prompt and after each of `new_ids` but the last, from one forward pass
    over the whole text (the model's own sliding masks), the output head applied in slices to keep memory low.
    Equal to `new_ids` exactly when PyTorch's greedy decoding would have written them."""
    text = torch.cat([ids, torch.tensor([new_ids[:-1]])], dim=1)
    with torch.inference_mode():
        hidden = model.model(text).last_hidden_state[0, ids.shape[1] - 1:]
        head = model.get_output_embeddings()
        return [int(t) for rows in hidden.split(128) for t in head(rows).argmax(-1)]


@pytest.mark.slow
@pytest.mark.extended  # three windows of Gemma3's rings; tiny Gemma3 models check the same wrap in the full suite
def test_gemma3_own_window_matches_pytorch_over_three_windows():
    """Its sliding layers are rings of 512 slots: a 1000-token prompt wraps them once in the prefill, and 560 new
    tokens (past positions 1024 and 1536) wrap them twice more while decoding. PyTorch reads the JAX output in one
    pass (its greedy pick at every step), not 560 steps of its own."""
    loaded = bundled("gemma3-270m")
    text = " ".join(f"Day {i}: the dragon brewed tea and counted the clouds." for i in range(90))
    ids = encoded(loaded, text)[:, :1000]
    assert ids.shape[1] == 1000
    spec = RunSpec(model=loaded.name, backend="jax", cache="sliding", max_new_tokens=560, min_new_tokens=560)
    jax_out = jax_run(loaded, ids, spec)[0]
    assert torch_greedy_choices(loaded.model, ids, jax_out.sequences[0]) == jax_out.sequences[0]
    assert jax_out.extra["cache_layers"]["ring(slots=512, window=512)"] == 15

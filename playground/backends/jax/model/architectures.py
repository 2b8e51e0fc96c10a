"""Which model architectures the JAX path runs, and why it refuses the others before anything compiles.

The JAX path traces transformers' own modeling code through torchax, with our attention in place of the
model's (traced.py). That is exact only where the model's attention goes through transformers' attention
interface and carries nothing our attention leaves out, and where every op lowers with fixed shapes. So
the path runs an allow-list: the architectures whose greedy tokens equal PyTorch's in the architecture grid
(tests/unit/test_architectures.py, tests/integration/test_architecture_grid.py). Any other is refused with
its reason, never run into a traceback or, worse, into different tokens.

Plain data over a config dict or object: the runner checks a config on disk before loading (no jax import).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from playground.errors import PlaygroundError

# model_type -> what the grid covers beyond a plain decoder (kept for the refusal's list and for the README)
VERIFIED: dict[str, str] = {
    "llama": "SmolLM2",
    "mistral": "with a sliding window",
    "mixtral": "mixture of experts",
    "qwen2": "with sliding-window layers",
    "qwen3": "",
    "qwen3_moe": "mixture of experts",
    "phi": "partial rotary, parallel block",
    "phi3": "",
    "gemma": "",
    "gemma2": "sliding layers, soft-capped logits",
    "gemma3_text": "sliding and global layers",
    "olmo": "",
    "olmo2": "",
    "gpt2": "learned positions, Conv1D projections",
    "gpt_bigcode": "multi-query attention",
    "gpt_neox": "partial rotary",
    "starcoder2": "",
    "stablelm": "",
    "cohere": "",
    "granite": "",
    "smollm3": "",
}

# model_type -> why it cannot run here, where the reason is known
KNOWN_REASONS: dict[str, str] = {
    "gpt_oss": "its attention adds learned sink logits that the JAX attention does not model (tokens would differ)",
    "deepseek_v3": "its multi-head latent attention stores keys and values of different sizes",
    "deepseek_v2": "its multi-head latent attention stores keys and values of different sizes",
    "bloom": "its ALiBi attention does not go through transformers' attention interface, which the JAX path replaces",
    "gptj": "its attention does not go through transformers' attention interface, which the JAX path replaces",
    "falcon": "its attention does not go through transformers' attention interface, which the JAX path replaces",
    "opt": "its position embeddings are computed from the mask with shapes jit cannot fix",
    "mamba": "it is a state-space model with no KV cache to decode over",
    "mamba2": "it is a state-space model with no KV cache to decode over",
}


def model_type(config: Mapping[str, Any] | Any) -> str:
    """The text model's type: a multimodal config's text part when it has one."""
    if isinstance(config, Mapping):
        text = config.get("text_config") or config
        return str(text.get("model_type", config.get("model_type", "")))
    text = getattr(config, "text_config", None) or config
    return str(getattr(text, "model_type", ""))


def check_architecture(config: Mapping[str, Any] | Any) -> None:
    """Refuse an architecture the JAX path is not known to run exactly, saying why and what to do."""
    kind = model_type(config)
    if kind in VERIFIED:
        return
    reason = KNOWN_REASONS.get(kind, "it is not among the architectures checked for token parity with PyTorch")
    raise PlaygroundError(
        f"backend=jax cannot run model type '{kind}': {reason}; run it with backend 'torch' "
        f"(the JAX path runs: {', '.join(sorted(VERIFIED))})")

"""A model's RoPE inverse frequencies, computed as its rotary embedding does: both backends' sink caches re-rotate
the sinks' keys with them (the PyTorch sink cache as a tensor, the JAX sink layout as its compile key)."""

from __future__ import annotations

from typing import Any

import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from playground.models.shapes import attention_shape


def rope_inv_freq(config: Any) -> torch.Tensor:
    """The model's RoPE inverse frequencies (D/2,), computed as its rotary embedding does."""
    rope = config.rope_parameters
    if rope.get("rope_type", "default") == "default":
        dim = attention_shape(config).head_dim
        return 1.0 / (rope["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    inv_freq, _ = ROPE_INIT_FUNCTIONS[rope["rope_type"]](config)
    return inv_freq

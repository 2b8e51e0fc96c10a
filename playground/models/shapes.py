"""Attention shapes read from a model config: heads, KV heads and head size, defaulted the way transformers does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playground.errors import PlaygroundError


@dataclass(frozen=True)
class AttentionShape:
    """What a KV cache's size and a head split depend on, for the model's text decoder."""

    heads: int
    kv_heads: int  # fewer than heads under grouped-query attention
    head_dim: int
    layers: int
    layer_types: tuple[str, ...]  # "full_attention" / "sliding_attention" per layer
    sliding_window: int | None  # the model's own window for its sliding layers

    @property
    def groups(self) -> int:
        """Query heads per KV head."""
        return self.heads // self.kv_heads


def check_head_split(heads: int, devices: int) -> None:
    """Tensor parallelism splits query heads evenly: refuse a device count that does not divide them."""
    if devices > 1 and heads % devices:
        divisors = [d for d in range(2, heads + 1) if heads % d == 0]
        raise PlaygroundError(
            f"devices={devices} does not divide the model's {heads} attention heads; tensor parallelism splits "
            f"heads evenly, so use devices in {', '.join(map(str, [1, *divisors]))}")


def text_config(config: Any) -> Any:
    """The decoder's config (multimodal configs nest it)."""
    return config.get_text_config(decoder=True)


def attention_shape(config: Any) -> AttentionShape:
    """Configs omit num_key_value_heads (plain multi-head) and head_dim (hidden_size / heads) when defaulted."""
    text = text_config(config)
    heads = text.num_attention_heads
    layers = text.num_hidden_layers
    layer_types = tuple(getattr(text, "layer_types", None) or ["full_attention"] * layers)
    return AttentionShape(
        heads=heads,
        kv_heads=getattr(text, "num_key_value_heads", None) or heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
        layers=layers,
        layer_types=layer_types,
        sliding_window=getattr(text, "sliding_window", None),
    )

"""A static cache that assisted decoding can roll back: transformers' `StaticCache` with an exact `crop()`.

transformers' assisted generation verifies several drafted tokens in one forward pass and then calls
`cache.crop(-rejected)`. Its `StaticLayer` has no `crop`, and `generate` refuses `type(cache) is StaticCache`.
A static layer needs no copy to roll back: every slot at or past `cumulative_length` is already hidden by the
causal mask (its query positions are all smaller), so lowering the counter is the whole rollback, and the next
pass overwrites the rejected slots in place. The tensors keep their size and address.

Sliding layers (Gemma3's 512-token local layers) are stored the same way, at full length, and keep their window
through the model's sliding mask. transformers' `StaticSlidingWindowLayer` is a ring that a verify pass rolls, so
a rejected draft would have pushed out a key the next pass needs.
"""

from __future__ import annotations

from typing import Any

from transformers import StaticCache
from transformers.cache_utils import StaticLayer, get_layer_types_and_kwargs


class CroppableStaticLayer(StaticLayer):
    """A `StaticLayer` whose `crop(-n)` forgets its last n tokens by moving the write position back."""

    is_croppable = True

    def __init__(self, max_cache_len: int, sliding: bool = False, **kwargs: Any) -> None:
        super().__init__(max_cache_len=max_cache_len)
        self.is_sliding = sliding  # the model's mask applies the window; every position stays stored

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop({tokens_to_remove}): pass a negative count of tokens to remove")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        if -tokens_to_remove > int(self.cumulative_length):
            raise ValueError(f"crop({tokens_to_remove}) removes more than the {int(self.cumulative_length)} "
                             "tokens stored")
        self.cumulative_length.sub_(-tokens_to_remove)  # in place: the counter's address stays static


class CroppableStaticCache(StaticCache):
    """`max_cache_len` slots per layer, every layer croppable (a subclass, so `generate` lets it assist)."""

    def __init__(self, config: Any, max_cache_len: int) -> None:
        super().__init__(config=config, max_cache_len=max_cache_len)
        layer_types, _ = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
        self.layers = [CroppableStaticLayer(max_cache_len, sliding=kind != "full_attention") for kind in layer_types]

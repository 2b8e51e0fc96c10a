"""StreamingLLM attention-sink KV cache (Xiao et al. 2023) on transformers' 5.x cache-layers API.

The cache keeps the first `num_sink_tokens` tokens (the "attention sinks") plus the most recent
`window_length - num_sink_tokens` tokens, so its per-layer length never exceeds `window_length`.

How positions are handled, and why it differs from the old `transformers.SinkCache` (<= 4.4x):
StreamingLLM gives every cached token its position *within the cache*, so query-key distances never
exceed `window_length - 1` however long the stream runs. The old SinkCache got there by moving the kept
recent keys back by the number of evicted tokens, which only worked because generate then cropped the
attention mask to the cache length and derived within-cache `position_ids` from it. In 5.x generate
owns the positions: it hands the model absolute, ever-growing `position_ids` (and `update` no longer
receives cos/sin), so the new query and key arrive rotated at their absolute position `P`. Moving the
recent keys back would put slot `i` at distance `P - i` from that query instead of `W - 1 - i`
(a test shows the logits then differ from StreamingLLM). Instead this cache moves the
*sinks forward* by the number of evicted tokens: cache slot `i` then always sits at RoPE position
`evicted + i`, a contiguous run ending exactly at the query. RoPE scores depend only on the query-key
distance, so the attention is identical to StreamingLLM's within-cache positions (distance of slot `i`
is `L - 1 - i`), and only the few sink keys are re-rotated per step. Sinks are re-rotated from their
first-seen keys each time (not step by step), so no rounding accumulates in bf16.

Masks: `get_seq_length()` is the number of tokens ever written (as transformers' sliding layers do), so
generate's slicing and the model's default `position_ids` stay absolute; `get_mask_sizes` reports the
number of keys `update` returns, with an offset placing the last one at the current absolute position.

Assisted decoding: a verify pass of q tokens is q steps at once, and each of its queries must see what a single
step at its position would: its own recent window, and the sinks rotated by its own eviction count. Once
`generate` activates past recording, such a pass returns the sinks once per query (rotated for it), then every
recent key, without evicting; `block_mask` is the 4D mask that shows each query its own (the model's forward is
given it, transformers_hooks.with_attention_mask); `crop` drops the rejected drafts and only then evicts. The
pass that holds the prompt carries no drafts (`draft_room`), so the prompt is stored as plain decoding stores it.

Limits: Llama-style RoPE only (rotate-half layout, one global RoPE with fixed frequencies, no sliding
layers); no padded batches (the sinks would be padding and the 2D mask is indexed by absolute position);
a chunk longer than the recent room (a long prompt) attends over everything with a plain causal mask,
then the window is kept; not compileable.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from playground.backends.refusals import check_sink_rope
from playground.backends.rope import rope_inv_freq


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF's RoPE layout: dimension i is paired with i + D/2."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_keys(keys: torch.Tensor, shift: int, inv_freq: torch.Tensor) -> torch.Tensor:
    """Move RoPE-rotated keys by `shift` positions (negative: back), since R(a) R(b) = R(a + b).

    Computed in float32 from float64 angles, so a large `shift` loses no precision before the cast back.
    """
    angles = shift * inv_freq.to(device=keys.device, dtype=torch.float64)  # (D/2,)
    emb = torch.cat((angles, angles))  # (D,)
    cos, sin = emb.cos().float(), emb.sin().float()  # (D,)
    k = keys.float()  # (B, H, T, D)
    return (k * cos + rotate_half(k) * sin).to(keys.dtype)  # (B, H, T, D)


class SinkLayer(DynamicLayer):
    """One layer's sink cache: `keys`/`values` (B, H, <= window_length, D) are exactly what is stored.

    `sink_keys` keeps the sinks as first seen (positions 0..S-1), the source of every re-rotation.
    """

    is_sliding = False  # the window is kept by eviction here, not by a sliding mask
    is_croppable = True  # with past recording: a verify pass evicts nothing until crop() (see the module doc)
    is_compileable = False

    def __init__(self, window_length: int, num_sink_tokens: int, inv_freq: torch.Tensor) -> None:
        super().__init__()
        self.window_length = window_length
        self.num_sink_tokens = num_sink_tokens
        self.inv_freq = inv_freq
        self.seen_tokens = 0  # tokens ever written = absolute position of the next one
        self.evicted = 0  # tokens dropped so far = how far the sinks have been moved forward
        self.sink_keys: torch.Tensor | None = None
        self.record_past = False  # set by generate's assisted path
        self.unevicted = 0  # tokens of the last verify pass, stored without evicting: what crop() may remove

    def activate_past_recording(self) -> None:
        self.record_past = True

    def stored_length(self) -> int:
        """Tokens held now (<= window_length); `get_seq_length` is the absolute count instead."""
        return 0 if self.keys is None or self.keys.numel() == 0 else self.keys.shape[-2]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Append, evict the oldest non-sink tokens past the window, re-rotate the sinks; return the K/V to attend."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.keys is None or self.values is None:
            raise RuntimeError("SinkLayer.update: the layer is initialized but holds no keys/values")
        sinks, window = self.num_sink_tokens, self.window_length
        query_length = key_states.shape[-2]
        if self.verifies(query_length):
            return self._verify_block(key_states, value_states)
        self.unevicted = 0
        keys = torch.cat([self.keys, key_states], dim=-2)  # (B, H, L + q, D)
        values = torch.cat([self.values, value_states], dim=-2)  # (B, H, L + q, D)
        self.seen_tokens += query_length
        excess = keys.shape[-2] - window
        if excess <= 0:
            self.keys, self.values = keys, values
            return keys, values
        if self.sink_keys is None:  # first eviction: the sinks are still at positions 0..S-1
            self.sink_keys = keys[:, :, :sinks].clone()  # (B, H, S, D)
        self.evicted += excess
        moved_sinks = rotate_keys(self.sink_keys, self.evicted, self.inv_freq)  # (B, H, S, D)
        self.keys = torch.cat([moved_sinks, keys[:, :, sinks + excess:]], dim=-2)  # (B, H, W, D)
        self.values = torch.cat([values[:, :, :sinks], values[:, :, sinks + excess:]], dim=-2)  # (B, H, W, D)
        if query_length <= window - sinks:
            return self.keys, self.values  # StreamingLLM: evict first, attend over the window
        # A chunk longer than the recent room cannot fit: it attends over everything (causally), keeps the window.
        return keys, values

    def verifies(self, query_length: int) -> bool:
        """Whether a chunk of this length is a verify pass (several tokens after a stored prompt that holds
        every sink), whose queries each need their own window."""
        return (self.record_past and query_length > 1 and self.is_initialized
                and self.seen_tokens >= max(self.num_sink_tokens, 1))

    def _first_sinks(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The sinks' keys as first seen (positions 0..S-1) and their values."""
        if self.keys is None or self.values is None:
            raise RuntimeError("SinkLayer: no keys stored yet")
        sinks = self.num_sink_tokens
        first = self.sink_keys if self.sink_keys is not None else self.keys[:, :, :sinks]
        return first, self.values[:, :, :sinks]

    def _verify_block(self, key_states: torch.Tensor,
                      value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q tokens at once: the sinks once per query, rotated by its eviction count, then every recent key and
        the new ones (block_mask says which each query sees); stored without evicting, until crop()."""
        if self.keys is None or self.values is None:
            raise RuntimeError("SinkLayer: no keys stored yet")
        sinks, start = self.num_sink_tokens, self.seen_tokens
        first_keys, first_values = self._first_sinks()
        moved = [rotate_keys(first_keys, self._evicted_at(start + j), self.inv_freq)
                 for j in range(key_states.shape[-2])]  # (B, H, S, D) per query
        recent_keys = torch.cat([self.keys[:, :, sinks:], key_states], dim=-2)  # (B, H, R + q, D)
        recent_values = torch.cat([self.values[:, :, sinks:], value_states], dim=-2)
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        self.seen_tokens += key_states.shape[-2]
        self.unevicted = key_states.shape[-2]
        return (torch.cat([*moved, recent_keys], dim=-2),
                torch.cat([first_values] * len(moved) + [recent_values], dim=-2))

    def _evicted_at(self, position: int) -> int:
        """Tokens evicted once the token at `position` is stored (the sinks' rotation its query sees)."""
        return max(position + 1 - self.window_length, 0)

    def block_mask(self, query_length: int) -> torch.Tensor:
        """(q, q * S + R + q) bool: for a verify pass about to start, which of `_verify_block`'s keys each query
        sees, as a single step at its position would: its own sink copy, and the recent keys of its window."""
        sinks, start = self.num_sink_tokens, self.seen_tokens
        recent = self.stored_length() - sinks
        at = self.keys.device if self.keys is not None else None
        queries = torch.arange(start, start + query_length, device=at)[:, None]  # (q, 1) absolute positions
        held = torch.arange(start - recent, start + query_length, device=at)[None, :]  # (1, R + q) positions
        own_sinks = torch.eye(query_length, dtype=torch.bool, device=at).repeat_interleave(sinks, dim=1)  # (q, qS)
        window = (held <= queries) & (held > queries - (self.window_length - sinks))
        return torch.cat([own_sinks, window], dim=1)

    def draft_room(self) -> int | None:
        """The pass that stores the prompt carries no drafts: plain decoding stores the prompt alone."""
        return 0 if not self.is_initialized else None

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(keys `update` will return, offset putting the last one at the current absolute position)."""
        total = self.stored_length() + query_length
        fits = total <= self.window_length or query_length > self.window_length - self.num_sink_tokens
        kv_length = total if fits else self.window_length
        return kv_length, self.seen_tokens + query_length - kv_length

    def get_seq_length(self) -> int:
        return self.seen_tokens

    def get_max_length(self) -> int:
        return self.window_length

    def reset(self) -> None:
        super().reset()
        self.seen_tokens = self.evicted = self.unevicted = 0
        self.sink_keys = None

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last rejected drafts, then evict down to the window as single steps would have. A token
        already evicted cannot come back: only a verify pass's tokens (stored unevicted) can be removed."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop({tokens_to_remove}): pass a negative count of tokens to remove")
        if not self.is_initialized or self.keys is None or self.values is None:
            return
        if -tokens_to_remove > (self.unevicted if self.evicted else self.stored_length()):
            raise RuntimeError(f"SinkCache cannot roll back {-tokens_to_remove} tokens after evicting: only a "
                               "verify pass's tokens (stored unevicted under past recording) can be removed")
        self.unevicted = 0
        if tokens_to_remove:
            self.keys, self.values = self.keys[:, :, :tokens_to_remove], self.values[:, :, :tokens_to_remove]
            self.seen_tokens += tokens_to_remove
        excess = self.stored_length() - self.window_length
        if excess > 0:
            sinks = self.num_sink_tokens
            first_keys, _ = self._first_sinks()
            self.sink_keys = first_keys.clone()
            self.evicted += excess
            moved = rotate_keys(self.sink_keys, self.evicted, self.inv_freq)
            self.keys = torch.cat([moved, self.keys[:, :, sinks + excess:]], dim=-2)
            self.values = torch.cat([self.values[:, :, :sinks], self.values[:, :, sinks + excess:]], dim=-2)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        if self.sink_keys is not None:
            self.sink_keys = self.sink_keys.index_select(0, beam_idx.to(self.sink_keys.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        if self.sink_keys is not None:
            self.sink_keys = self.sink_keys.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        if self.sink_keys is not None:
            self.sink_keys = self.sink_keys[indices, ...]


class SinkCache(Cache):
    """StreamingLLM cache: one `SinkLayer` per model layer, usable as `generate(past_key_values=...)`."""

    def block_mask(self, query_length: int) -> torch.Tensor | None:
        """The 4D mask (1, 1, q, keys) a verify pass of `query_length` tokens needs, or None for a plain chunk."""
        layer = self.layers[0]
        if not isinstance(layer, SinkLayer) or not layer.verifies(query_length):
            return None
        return layer.block_mask(query_length)[None, None]

    def __init__(self, config: Any, window_length: int, num_sink_tokens: int = 4) -> None:
        if not isinstance(window_length, int) or not isinstance(num_sink_tokens, int):
            raise ValueError("SinkCache: window_length and num_sink_tokens must be ints")
        if num_sink_tokens < 0 or window_length <= num_sink_tokens:
            raise ValueError(f"SinkCache: need 0 <= num_sink_tokens < window_length (got num_sink_tokens="
                             f"{num_sink_tokens}, window_length={window_length}); the window holds the sinks "
                             "plus at least one recent token")
        text_config = config.get_text_config(decoder=True)
        check_sink_rope(text_config)
        inv_freq = rope_inv_freq(text_config)  # (D/2,), shared by every layer
        super().__init__(layers=[SinkLayer(window_length, num_sink_tokens, inv_freq)
                                 for _ in range(text_config.num_hidden_layers)])
        self.window_length = window_length
        self.num_sink_tokens = num_sink_tokens

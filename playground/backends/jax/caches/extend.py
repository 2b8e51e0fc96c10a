"""Several new tokens at once over a filled cache: the verify pass of assisted decoding.

The main model checks a whole draft in one forward: the last token and the drafted ones are written at
consecutive positions, and each attends over what plain decoding would show it at its position (each layout's
`extend`: per-query masks, and per-query sink rotations). Rejected drafts are rolled back by moving the layers'
counters back: what lies at or past the counter is masked out of every later step and overwritten by the next
write. A bounded ring (a sliding window, the sink cache's recent tokens, the quantized cache's full-precision
residual) gets `width - 1` spare slots for that: a pass writes at most that far past what the next token needs,
so no rejected draft overwrites a position still in some window.
"""

from __future__ import annotations

from typing import Any

from playground.backends.jax.caches import plan as cache_plan
from playground.backends.jax.caches.plan import CachePlan
from playground.spec import RunSpec


def assisted_plan(spec: RunSpec, config: Any, prompt_len: int, width: int) -> CachePlan:
    """The plain plan's layouts with room for one verify pass past max_new_tokens (a pass writes all its
    drafts before any is rejected), and spare ring slots for a pass of `width` tokens."""
    plain = cache_plan.plan_cache(spec, config, prompt_len, width)
    lengths = cache_plan.request_lengths(spec, prompt_len, width, room=width)
    return CachePlan(tuple(layer.with_room(width).resized(lengths[0]) for layer in plain.layers), tuple(lengths))


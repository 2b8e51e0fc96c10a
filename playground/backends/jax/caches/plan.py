"""The cache a request decodes over: each layer's layout, decided once from the spec and the model config,
and the cache lengths decoding steps through.

| cache     | global layers                            | the model's own sliding layers |
| --------- | ---------------------------------------- | ------------------------------ |
| static    | ring that never wraps, prompt + new long | ring of the model's window     |
| dynamic   | the same, growing by doubling            | ring of the model's window     |
| sliding   | grow (model with sliding layers), else a ring of spec.window (imposed) | ring of the window |
| sink      | sinks + recent ring, spec.window in all  | refused (RoPE re-rotation)     |
| quantized | quantized store + full-precision residual ring | ring of the model's window |

Every ring stops at its bound, so bounded layers stop growing while the cache length keeps doubling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers.cache_utils import get_layer_types_and_kwargs

from playground import registry
from playground.backends.jax.caches.layout import Layout, nbytes
from playground.backends.jax.caches.ring import RingLayout
from playground.backends.refusals import check_cache
from playground.errors import PlaygroundError
from playground.models.shapes import attention_shape
from playground.registry.kv_store import store_dtype
from playground.spec import RunSpec

MIN_PREFILL_BUCKET = 16
# A growing cache starts at least this long; each length it steps through compiles its decode program once
# (the growing, sink and quantized decode programs take 5-10 s each on 2 cores), so the page's defaults (a chat
# prompt and 64 new tokens: under 128 positions) compile one, as static does. 128 positions of SmolLM2's
# cache are 5.9 MB.
GROWTH_FLOOR = 128
# A preallocated cache is prompt + max_new_tokens rounded up to this, so nearby requests share programs.
STATIC_GRANULE = 64


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def prefill_bucket(prompt_len: int) -> int:
    """Padded prompt length: a power of two, at least MIN_PREFILL_BUCKET."""
    return max(MIN_PREFILL_BUCKET, _next_power_of_two(prompt_len))


def static_length(prompt_len: int, max_new_tokens: int) -> int:
    """Positions for the prompt and every new token, rounded up to STATIC_GRANULE."""
    return -(-(prompt_len + max_new_tokens) // STATIC_GRANULE) * STATIC_GRANULE


def new_tokens(spec: RunSpec) -> int:
    """The new tokens a request's programs are sized for: its max_new_tokens, or for a step of a branch tree
    (`sized_new_tokens`) the tree's whole budget, which counts the step's forced prefix among them."""
    if not spec.sized_new_tokens:
        return spec.max_new_tokens
    return max(spec.sized_new_tokens, len(spec.prefix_ids) + spec.max_new_tokens)


def sized_prompt(spec: RunSpec, prompt_len: int) -> int:
    """The prompt the sizes count from: the whole prompt, or for a tree's step the prompt before its forced
    prefix (the budget holds the prefix), so that every step of one tree has the same sizes."""
    return prompt_len - len(spec.prefix_ids) if spec.sized_new_tokens else prompt_len


def request_bucket(spec: RunSpec, prompt_len: int) -> int:
    """The request's prefill bucket: its prompt's, or for a tree's step the longest prompt one of the tree's
    steps can have (the tree's prompt and all but the last of its tokens)."""
    if not spec.sized_new_tokens:
        return prefill_bucket(prompt_len)
    return prefill_bucket(sized_prompt(spec, prompt_len) + new_tokens(spec) - 1)


def request_lengths(spec: RunSpec, prompt_len: int, first_chunk: int, room: int = 0) -> list[int]:
    """The cache lengths of `spec`'s request, with `room` positions past its last new token. A tree's step is
    preallocated at the tree's length, whatever its cache type: a growing cache would start from a length that
    holds its prompt and prefix, which changes along the branch (and with it every program)."""
    if spec.sized_new_tokens:
        return [static_length(sized_prompt(spec, prompt_len), new_tokens(spec) + room)]
    return cache_lengths(registry.cache_type(spec.cache), prompt_len, spec.max_new_tokens + room, first_chunk)


def growth_lengths(prompt_len: int, max_new_tokens: int, first_chunk: int) -> list[int]:
    """The lengths a growing cache steps through: from the smallest power of two (at least GROWTH_FLOOR) that
    holds the prompt and the first decode chunk, doubling, up to static_length()."""
    final = static_length(prompt_len, max_new_tokens)
    length = max(GROWTH_FLOOR, _next_power_of_two(prompt_len + first_chunk))
    lengths = [min(length, final)]
    while lengths[-1] < final:
        lengths.append(min(lengths[-1] * 2, final))
    return lengths


def cache_lengths(cache: registry.CacheType, prompt_len: int, new_tokens: int, first_chunk: int) -> list[int]:
    """One length for a preallocated cache; the doubling lengths for a growing one."""
    if cache.preallocated:
        return [static_length(prompt_len, new_tokens)]
    return growth_lengths(prompt_len, new_tokens, first_chunk)


Layouts = tuple[Layout, ...]


@dataclass(frozen=True)
class CachePlan:
    """The layers' layouts (sized for lengths[0]) and the cache lengths decoding may step through."""

    layers: Layouts
    lengths: tuple[int, ...]

    def at(self, length: int) -> Layouts:
        return tuple(layer.resized(length) for layer in self.layers)

    def schedule(self) -> list[Layouts]:
        """The distinct layouts decoding steps through, in order (bounded layers stop changing)."""
        steps: list[Layouts] = []
        for length in self.lengths:
            layouts = self.at(length)
            if not steps or layouts != steps[-1]:
                steps.append(layouts)
        return steps


def plan_cache(spec: RunSpec, config: Any, prompt_len: int, first_chunk: int) -> CachePlan:
    """The layouts for `spec` on a model with this text config; refuses what cannot be laid out."""
    layer_types, _ = get_layer_types_and_kwargs(config)
    unknown = sorted(set(layer_types) - {"full_attention", "sliding_attention"})
    if unknown:
        raise PlaygroundError(f"the JAX decoder does not support {', '.join(unknown)} layers (only full and "
                              "sliding-window attention); use backend torch")
    native = "sliding_attention" in layer_types
    check_cache(spec, config)  # the same refusals, in the same words, as the PyTorch path
    cache = registry.cache_type(spec.cache)
    lengths = request_lengths(spec, prompt_len, first_chunk)
    shape = attention_shape(config)
    # the model's own sliding layers store what the cache's full-precision layers store, where it chooses a dtype
    dtype = store_dtype(spec) if "cache_dtype" in cache.knobs else "float32"
    layers = tuple(
        RingLayout(shape.kv_heads, shape.head_dim, slots=min(int(config.sliding_window), lengths[0]),
                   window=int(config.sliding_window), dtype=dtype) if kind == "sliding_attention"
        else cache.impl["jax"](spec, config, native, lengths[0])
        for kind in layer_types)
    return CachePlan(layers, tuple(lengths))


def plan_bytes(layouts: Layouts, batch: int = 1) -> int:
    """Bytes of every array a cache with these layouts holds."""
    return sum(nbytes(layout, batch) for layout in layouts)


def peak_bytes(plan: CachePlan, batch: int = 1) -> tuple[int, bool]:
    """The most bytes the cache holds at once over a request, and whether that peak is a growth step (the old
    layouts' arrays and the new ones' are both held while one is copied into the other)."""
    schedule = plan.schedule()
    peak, growing = plan_bytes(schedule[0], batch), False
    for old, new in zip(schedule, schedule[1:], strict=False):
        both = plan_bytes(old, batch) + plan_bytes(new, batch)
        if both > peak:
            peak, growing = both, True
    return peak, growing


def describe(layouts: Layouts) -> dict[str, int]:
    """How many layers have each layout, for the result's `extra`."""
    counts: dict[str, int] = {}
    for layout in layouts:
        name = type(layout).__name__.removesuffix("Layout").lower()
        details = {k: v for k, v in vars(layout).items()
                   if k not in ("heads", "head_dim", "inv_freq") and (k, v) not in (("spare", 0), ("dtype", "float32"))}
        key = f"{name}({', '.join(f'{k}={v}' for k, v in details.items())})"
        counts[key] = counts.get(key, 0) + 1
    return counts

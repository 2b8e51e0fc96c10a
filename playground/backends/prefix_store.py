"""The prefix store: finished runs' cache states, kept so that a later run sharing their first tokens prefills only
the rest (chat turns, repeated system prompts, API requests with a common few-shot block).

An entry holds a backend's snapshot of the cache (opaque here: each backend takes and restores its own) and the
exact token ids whose keys and values it holds. Entries are found by a settings key (everything that changes what
a cache holds for the same ids, and the isolation scope) and then by the longest common prefix of ids. The store is
least-recently-used within a byte budget, `PLAYGROUND_PREFIX_CACHE_MB`.

Lookup is a linear scan over the entries of one settings key. A radix tree over ids (SGLang's) pays off with
thousands of entries sharing branches; this store holds a handful (its budget is a few full-length caches of a
small model), and comparing one id list against each of them is microseconds against a prefill's seconds. A scan
also needs no node splitting or merging when entries are evicted or replaced.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from playground.errors import PlaygroundError

# 16 GB of a CPU Basic Space: the memory budget (60%) holds the weights (SmolLM2 fp32 0.5 GB, Gemma-3-270M 1.1 GB,
# each again as the JAX path's copy) and the running caches; 1 GiB keeps about 22k positions of SmolLM2's fp32
# KV (46 KB each): a few long conversations, at a sixteenth of the machine
DEFAULT_MB = 1024
ENV = "PLAYGROUND_PREFIX_CACHE_MB"


def budget_bytes() -> int:
    """PLAYGROUND_PREFIX_CACHE_MB in bytes (0 turns the store off); a malformed value is refused in one line."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_MB * 2**20
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb >= 0 or mb == float("inf"):
        raise PlaygroundError(f"{ENV}={raw!r} is not a size in MB; use a number such as 1024, or 0 to turn "
                              "the prefix store off")
    return int(mb * 2**20)


# RunSpec keys that change what a cache holds for the same token ids (model, weights, backend and cache are
# always part of the key); a strategy's knobs do not: every strategy fills the cache with the same keys and values
CACHE_KNOBS = ("model", "weights", "backend", "cache", "cache_dtype", "cache_bits", "cache_key_bits",
               "cache_value_bits", "residual_length", "window", "sink_tokens", "devices")


# The PyTorch path's rules, apart from the model (backends/torch/prefix_reuse.py adds its sliding layers): read
# here too by the page, which disables the column's reuse checkbox with the reason. The caches whose every layer
# keeps every position in full precision (or in the bf16 store, rounded once):
EXACT_CACHES = ("dynamic", "static")
# generate()'s loops that prefill only what the cache does not hold yet (prompt lookup's first verify pass is made to,
# transformers_hooks.first_pass_past_cache), and DoLa's loop of ours, whose prefill is generate()'s and which reads
# only the last position's layers. Contrastive search weighs every earlier position's hidden state (a kept cache
# holds none), diverse beam search reorders the rows of an empty cache, and a draft model prefills the prompt into a
# cache of its own
REUSING_STRATEGIES = ("greedy", "sampling", "beam", "beam_sample", "assisted", "dola")
# The JAX path's plug-ins that continue a kept cache (backends/jax/prefix_reuse.py): those whose prefill is the
# engine's own over one row, handing the start only its last logits (beam search repeats the row afterwards)
JAX_REUSING_STRATEGIES = ("greedy", "sampling", "beam", "beam_sample", "assisted")
# The caches kept whole and restored bit for bit (backends/torch/restored_reuse.py, backends/jax/restored_reuse.py),
# but whose warm run need not be the cold one: a quantized store continued later is quantized at other points, and
# a bounded cache continued over a new suffix attends over its kept window where a whole prompt attends over itself.
# A warm run of these reports its difference from the cold run (`reuse.kl_vs_cold`, `reuse.first_difference`). One
# row each, measured against cold on greedy and sampling alone: a beam search would restore one row into several
RESTORED_CACHES = ("quantized", "sliding", "sink")
RESTORED_STRATEGIES = ("greedy", "sampling")


def cache_cold_reason(strategy: str, cache: str) -> str | None:
    """The cache's part of `cold_reason`: why this cache type is neither restored nor kept."""
    if cache in EXACT_CACHES:
        return None
    if cache not in RESTORED_CACHES:
        return f"the {cache} cache is not kept between runs"
    if strategy in RESTORED_STRATEGIES:
        return None
    return f"the {cache} cache is kept for one-row runs (greedy, sampling); {strategy} prefills whole"


def cold_reason(strategy: str, cache: str, torch_compile: str = "off", backend: str = "torch",
                assistant: str | None = None) -> str | None:
    """Why a run of this strategy and cache on `backend` neither starts from nor leaves a kept cache (apart from
    the model: each backend adds its sliding layers); None: it does. `assistant`: assisted decoding's draft model
    (None: prompt lookup, or no assisted decoding)."""
    reason = cache_cold_reason(strategy, cache)
    if reason is not None:
        return reason
    if strategy not in REUSING_STRATEGIES:
        return f"{strategy} runs its first pass over the whole prompt; the cache is not kept"
    if backend == "jax" and strategy not in JAX_REUSING_STRATEGIES:
        return f"the JAX path keeps its cache for greedy, sampling, beam and prompt-lookup runs; {strategy} " \
               "prefills whole"
    if assistant is not None:  # only assisted decoding takes one (RunSpec refuses it elsewhere)
        return "a draft model prefills the whole prompt into a cache of its own; only prompt lookup is kept"
    if torch_compile != "off":
        return "torch.compile runs over a static cache of its own addresses; the cache is not kept"
    return None


def settings_key(spec: Any, scope: str) -> tuple[Any, ...]:
    """What must match for an entry to be reused: the cache's settings and the isolation scope (a page session,
    or an API key and `cache_salt`), so that no visitor learns from a fast answer what another one typed."""
    return (scope, *(getattr(spec, name) for name in CACHE_KNOBS))


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many first ids `a` and `b` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass
class Kept:
    """A kept cache state (an entry of the store): the ids whose keys and values it holds, the backend's snapshot
    (opaque here) and its bytes. A backend hands one back after a run."""

    ids: tuple[int, ...]
    snapshot: Any
    nbytes: int


@dataclass(frozen=True)
class Match:
    """The entry a run starts from: it restores `shared` of the entry's positions (the common prefix)."""

    entry: Kept
    shared: int


@dataclass(frozen=True)
class ReusePlan:
    """What the runner asks of a backend for one run: start from `warm` (None: cold) and hand back a snapshot
    (`keep`); a backend that does neither is never given one."""

    warm: Match | None
    keep: bool


@dataclass
class PrefixStore:
    """Entries by settings key, least recently used first; thread-safe (the page's handlers and the API share one)."""

    budget: Callable[[], int] = budget_bytes
    _entries: OrderedDict[tuple[Any, tuple[int, ...]], Kept] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(entry.nbytes for entry in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: tuple[Any, ...], ids: Sequence[int], usable: int) -> Match | None:
        """The entry sharing the most first ids with `ids`, at most `usable` of them (a run must prefill at least
        its last token to have logits); None when none shares any. The entry becomes the most recently used."""
        best: tuple[int, tuple[Any, tuple[int, ...]]] | None = None
        with self._lock:
            for stored_key, entry in self._entries.items():
                if stored_key[0] != key:
                    continue
                shared = min(common_prefix(entry.ids, ids), usable)
                if shared > 0 and (best is None or shared > best[0]):
                    best = (shared, stored_key)
            if best is None:
                return None
            self._entries.move_to_end(best[1])
            return Match(self._entries[best[1]], best[0])

    def put(self, key: tuple[Any, ...], kept: Kept) -> None:
        """Keep a run's state, dropping the entries it extends (they are its prefixes), then the least recently used
        ones until the store is within its budget. A state larger than the whole budget is not kept."""
        budget = self.budget()
        if kept.nbytes > budget or not kept.ids:
            return
        with self._lock:
            for stored_key in [k for k in self._entries if k[0] == key and kept.ids[: len(k[1])] == k[1]]:
                del self._entries[stored_key]
            self._entries[(key, kept.ids)] = kept
            total = sum(entry.nbytes for entry in self._entries.values())
            while total > budget:
                _, dropped = self._entries.popitem(last=False)
                total -= dropped.nbytes

    def clear(self) -> int:
        """Drop every entry; the bytes freed."""
        with self._lock:
            freed = sum(entry.nbytes for entry in self._entries.values())
            self._entries.clear()
        return freed


STORE = PrefixStore()


def fit_beside_store(check: Callable[[int], None], store: PrefixStore = STORE) -> int:
    """Run the memory budget's `check(store bytes)`. Where the store's bytes are what refuses the run and emptying
    it lets the run go, empty it and return the bytes freed; where emptying it would not be enough, the refusal
    says so."""
    held = store.bytes
    try:
        check(held)
        return 0
    except PlaygroundError as refused:
        if not held:
            raise
        try:
            check(0)
        except PlaygroundError:
            raise PlaygroundError(f"{refused} (the prefix store's {held / 2**20:.0f} MiB was counted; emptying it "
                                  "would not be enough)") from None
        return store.clear()


class ReuseRecord(TypedDict):
    """The Result's `reuse`: what the prefix store did for a run."""

    reused_tokens: int  # positions restored from the store instead of prefilled (0: the run was cold)
    prompt_tokens: int  # the ids the run started from (prompt and forced tokens); the rest of them were prefilled
    exact: bool  # True: a warm run gives the cold run's tokens and probabilities (docs/caches.md, per cache)
    note: str | None  # why the run could not start from or leave a kept cache, or what the memory budget evicted
    store_bytes: int  # the store's bytes once the run's own state is kept
    # a warm run of a restored cache (RESTORED_CACHES), against the cold run of the same tokens, measured after
    # the run (each backend's reuse_vs_cold.py); None where not measured (a cold run, or an exact cache):
    kl_vs_cold: float | None  # mean KL(cold || warm) of the model's next-token distributions, nats
    kl_vs_cold_max: float | None  # the largest of them
    first_difference: int | None  # the first new token where the cold run's most likely token is another one


def plan(spec: Any, scope: str | None, refusal: str | None, ids: Sequence[int],
         store: PrefixStore = STORE) -> tuple[ReusePlan | None, str | None]:
    """What a run asks of its backend, and the note for its record. No scope (a benchmark, the CLI's one run, a
    tool): the store is not involved at all. `spec.reuse` off: the run is cold and leaves nothing."""
    if scope is None:
        return None, None
    if not spec.reuse:
        return None, "reuse is off for this run"
    if store.budget() <= 0:
        return None, f"the prefix store is off ({ENV}=0)"
    if refusal is not None:
        return None, refusal
    return ReusePlan(store.lookup(settings_key(spec, scope), ids, len(ids) - 1), keep=True), None


def keep(spec: Any, scope: str | None, plan_made: ReusePlan | None, output: Any, prompt_tokens: int,
         note: str | None, freed: int, store: PrefixStore = STORE) -> ReuseRecord | None:
    """Keep a run's cache (`output`: its first GenerationOutput; a stopped run's cache too: it holds what it
    computed) and say what reuse did; None for a run without a scope. `freed`: the store's bytes the memory
    budget emptied for the run. A warm run is exact, or its output says how it differs from the cold run
    (`vs_cold`); a match the backend could not cut back leaves its reason (`reuse_note`)."""
    if freed:
        note = f"the prefix store ({freed / 2**20:.0f} MiB) was emptied to fit this run in the memory budget"
    if scope is None:
        return None
    if plan_made is not None and output.kept is not None:
        store.put(settings_key(spec, scope), output.kept)
        output.kept = None
    vs_cold = output.vs_cold or {}
    return {"reused_tokens": output.reused_tokens, "prompt_tokens": prompt_tokens,
            "exact": vs_cold.get("exact", True), "note": output.reuse_note or note, "store_bytes": store.bytes,
            "kl_vs_cold": vs_cold.get("kl_mean"), "kl_vs_cold_max": vs_cold.get("kl_max"),
            "first_difference": vs_cold.get("first_difference")}

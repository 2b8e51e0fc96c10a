"""One Engine per loaded model (and device count): weights on the devices, and its compiled programs.

Weights move to the JAX devices once per model and are passed to every compiled function as arguments
(never baked in as constants). Compiled programs are kept in memory by their static key, up to a byte bound
(program_cache.py), and on disk in JAX's persistent compilation cache (disk_cache.py), so a restarted process,
or a program dropped from memory, loads instead of compiling. New programs compile on worker threads
(compiling.py), so a stopped request need not wait for one. Engines sit in a WeakKeyDictionary keyed by the
torch model: when the model LRU drops a model, its device weights and programs go with it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torchax
from jax.sharding import NamedSharding, PartitionSpec
from jax.stages import CompilerOptions, Lowered
from torchax import interop
from transformers import PreTrainedModel

from playground import device
from playground.backends.jax.caches import pytree
from playground.backends.jax.caches.plan import Layouts
from playground.backends.jax.caches.pytree import JaxCache
from playground.backends.jax.engine import compiling, disk_cache, prefill, tensor_parallel, traced
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.program_cache import ProgramCache, program_cache_bound
from playground.backends.jax.model import layer_outputs

# Debug options per compiled program (they are part of its cache key): the device's (device.py)
COMPILER_OPTIONS: CompilerOptions = dict(device.current().xla_options)


def _nothing() -> None:
    """No one is listening for compiles."""


# called before a program compiles; set per request by the backend (the request runs in one worker thread)
_COMPILE_NOTICE: ContextVar[Callable[[], None]] = ContextVar("compile_notice", default=_nothing)


@contextmanager
def compile_notices(notify: Callable[[], None]) -> Iterator[None]:
    """Within the block, `notify()` runs before any program compiles (on this thread), so the page can say so."""
    token = _COMPILE_NOTICE.set(notify)
    try:
        yield
    finally:
        _COMPILE_NOTICE.reset(token)


class Engine:
    """Device weights, the traced twin and the compiled programs of one model (every strategy builds its own
    start, step and growth programs through kernel.py; the prompt's prefill program is the engine's)."""

    def __init__(self, model: PreTrainedModel, devices: int, weights: str = "fp32") -> None:
        start = time.perf_counter()
        config = model.config.get_text_config(decoder=True)
        tensor_parallel.check(config, devices)
        self.mesh = tensor_parallel.make_mesh(devices)
        self.devices = devices
        self.config = config
        self.env = torchax.default_env()
        # fused projections would mix q/k/v rows in one split; on a mesh each projection is split by heads
        self.precision = weights  # "fp32"; "int8" or "q4": every linear layer int8 (int8.py) or 4-bit (q4.py)
        self.twin = traced.build_twin(model, fuse=self.mesh is None, weights=weights)
        place = tensor_parallel.placer(self.mesh, config) if self.mesh is not None else None
        self.weights = traced.jax_weights(model, self.twin, place)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.weight_bytes = traced.weight_bytes(self.weights)
        self.sharding_info = tensor_parallel.describe(self.mesh, config)
        self.programs = ProgramCache(program_cache_bound())
        self._building: dict[tuple, Future[Any]] = {}  # programs being compiled, by key
        self._building_lock = threading.RLock()
        self.move_s = time.perf_counter() - start

    # -- shardings -------------------------------------------------------------------------------------------
    def replicated(self) -> NamedSharding | None:
        """The layout of small arrays (tokens, counters, args): whole on every device of the mesh."""
        return NamedSharding(self.mesh, PartitionSpec()) if self.mesh is not None else None

    def _cache_sharding(self) -> NamedSharding | None:
        if self.mesh is None:
            return None
        return NamedSharding(self.mesh, tensor_parallel.cache_spec(self.config, self.devices))

    def put(self, value: Any) -> Any:
        """Host values -> device, replicated over the mesh if there is one."""
        sharding = self.replicated()
        return jax.device_put(value, sharding) if sharding is not None else jax.device_put(value)

    def abstract_cache(self, layouts: Layouts, batch: int) -> JaxCache:
        return pytree.abstract_cache(layouts, batch, self._cache_sharding(), self.replicated())

    def shape_struct(self, shape: tuple[int, ...], dtype: Any) -> jax.ShapeDtypeStruct:
        """An abstract argument for lowering, laid out as put() lays out the real one."""
        return jax.ShapeDtypeStruct(shape, dtype, sharding=self.replicated())

    def constrain(self, cache: JaxCache) -> JaxCache:
        """Keep the cache's layout across calls, so the next call (compiled for it) accepts it as is: every
        array split by KV heads (scales too, so each device dequantizes its own heads), counters replicated."""
        if self.mesh is None:
            return cache
        split, replicated = self._cache_sharding(), self.replicated()
        for layer in cache.jax_layers:
            layer.arrays = {name: jax.lax.with_sharding_constraint(a, split) for name, a in layer.arrays.items()}
            layer.cumulative_length = jax.lax.with_sharding_constraint(layer.cumulative_length, replicated)
        return cache

    # -- traced functions (pure JAX outside, the HF model inside) ---------------------------------------------
    def forward(self, weights: dict, cache: JaxCache, ids: jax.Array, positions: jax.Array,
                 keep: jax.Array | int) -> tuple[jax.Array, JaxCache]:
        """The HF model via functional_call on the twin; returns logits (B, kept, V) and the updated cache.

        The cache goes in as is (its layers work on JAX arrays and update them in place on the object)."""
        w, i, p, k = interop.torch_view((weights, ids, positions, keep))
        with self.env:
            out = torch.func.functional_call(
                self.twin.module, w, (i,),
                {"position_ids": p, "past_key_values": cache, "use_cache": True, "logits_to_keep": k},
                tie_weights=False)
            logits = out.logits
        self.twin.clear()
        return interop.jax_view(logits), cache

    def forward_layers(self, weights: dict, cache: JaxCache, ids: jax.Array, positions: jax.Array,
                       keep: jax.Array | int, *, hidden: tuple[int, ...] = (),
                       heads: tuple[int, ...] = ()) -> tuple[jax.Array, tuple[jax.Array, ...], tuple[jax.Array, ...],
                                                             JaxCache]:
        """forward(), and the hidden states after `hidden` layers (B, T, H) and those after `heads` layers through
        the output head (B, kept, V) (layer_outputs.py): what contrastive search and DoLa read."""
        w, i, p, k = interop.torch_view((weights, ids, positions, keep))
        with self.env:
            logits, states, head_logits = torch.func.functional_call(
                layer_outputs.LayerOutputs(self.twin.module), layer_outputs.prefixed(w), (i,),
                {"hidden": hidden, "heads": heads, "keep": k, "position_ids": p, "past_key_values": cache,
                 "use_cache": True}, tie_weights=False)
        self.twin.clear()
        return interop.jax_view(logits), interop.jax_view(states), interop.jax_view(head_logits), cache

    def _prefill(self, weights: dict, ids: jax.Array, length: jax.Array, *,
                 layouts: Layouts) -> tuple[jax.Array, JaxCache]:
        """Prompt padded on the right to its bucket, into a new cache; returns the logits at the last real
        position. Decoding continues at the true length, overwriting what the padding left."""
        def step(cache: JaxCache, chunk: jax.Array, positions: jax.Array, keep: jax.Array) -> tuple:
            logits, cache = self.forward(weights, cache, chunk, positions, keep)
            return logits[:, -1], (), cache  # (B, V)

        logits, _, cache = prefill.prefill(step, ids, length, layouts, self.constrain)  # in chunks: prefill.py
        if self.mesh is not None:
            logits = jax.lax.with_sharding_constraint(logits, self.replicated())
        return logits, cache

    # -- compile registry --------------------------------------------------------------------------------------
    def program(self, key: tuple, lower: Callable[[], Lowered], warm: Callable[[Any], None] | None = None) -> Pending:
        """The compiled program for `key`: kept in memory, still being built (for a stopped request, whose
        compile runs on), or built now on the request's compile pool (compiling.py). A build lowers `lower()`
        under TRACING, compiles it (or loads it from the on-disk cache), sizes it into the program cache, then
        runs `warm(program)` once if given (XLA's CPU executables with a sort no longer serialize once run).
        The compiler options are part of the key: a program built under other options is another program."""
        key = (*key, tuple(sorted(COMPILER_OPTIONS.items())))
        with self._building_lock:
            program = self.programs.lookup(key)
            if program is not None:
                return Pending.ready(program)
            future = self._building.get(key)
            if future is None:
                future = compiling.submit(partial(self._build, key, lower, warm))
                self._building[key] = future
                future.add_done_callback(lambda _: self._forget(key))  # RLock: may run here if already done
        _COMPILE_NOTICE.get()()
        return Pending(future, built=True)

    @contextmanager
    def tracing(self) -> Iterator[None]:
        """Hold for a trace of the model (compiling.TRACING). torchax makes its PRNG key per thread on first use,
        from torch's seed (random per process): made inside a trace, it would be a constant in the program, whose
        disk-cache key then differed in every process, and a restarted app would load nothing. Made here, before
        the trace, it stays out of the program."""
        with compiling.TRACING:
            _ = self.env.prng_key
            yield

    def _build(self, key: tuple, lower: Callable[[], Lowered], warm: Callable[[Any], None] | None) -> Any:
        with self.tracing():
            lowered = lower()
        program = lowered.compile(COMPILER_OPTIONS)
        self.programs.add(key, program)  # sizes it by serializing its executable: part of making it ready
        if warm is not None:
            warm(program)
        return program

    def _forget(self, key: tuple) -> None:
        with self._building_lock:
            self._building.pop(key, None)

    def prefill_program(self, bucket: int, layouts: Layouts, batch: int = 1,
                        own: Callable[..., Any] | None = None, key: tuple = ()) -> Pending:
        """The prompt (batch, bucket) into a new cache over `layouts`: (the last logits (batch, V), the cache).
        `own` is a strategy's prefill `(weights, ids, length, layouts=...)` that hands its start more than the
        last logits (contrastive search's hidden states, DoLa's early layers), keyed by `key` as well."""
        shape = self.shape_struct
        fn = self._prefill if own is None else own

        def lower() -> Lowered:
            return jax.jit(partial(fn, layouts=layouts)).lower(self.weights, shape((batch, bucket), jnp.int32),
                                                               shape((), jnp.int32))

        def warm(compiled: Any) -> None:
            # XLA's CPU backend hands the prompt's multi-row products to YNNPACK, which prepares each of them on
            # the program's first execution (SmolLM2: ~0.5 s, against ~0.1 s for a warm prefill). Run it once
            # on zeros now, so that cost counts as compiling and not in the first request's TTFT.
            jax.block_until_ready(compiled(self.weights, self.put(np.zeros((batch, bucket), np.int32)),
                                           self.put(np.int32(1))))

        return self.program(("prefill", batch, bucket, prefill.chunk_tokens(), layouts, *key), lower, warm)


def device_bytes(model: PreTrainedModel, devices: int, weights: str = "fp32") -> int:
    """Bytes an Engine for (model, devices, weights) allocates beyond the model's own tensors, counted before it
    does (the memory budget reserves them first). On one device fused q/k/v and gate/up matrices are new arrays
    and the other weights are shared through DLPack when aligned; quantized matrices (int8, q4) and their scales
    are always new;
    on a mesh every weight is copied to the devices, split ones once in all and replicated ones once per device.
    Tied weights count once, as jax_weights() places them once."""
    config = model.config.get_text_config(decoder=True)
    twin = traced.build_twin(model, fuse=devices == 1, weights=weights)
    tensors = traced.model_tensors(model)
    total, seen = 0, set()
    for name, sources in twin.sources.items():
        parts = [tensors[s] for s in sources]
        names = (name, *twin.companions.get(name, ()))
        key = traced.source_key(twin, name, parts)
        if key in seen:
            continue
        seen.add(key)
        numel = sum(p.numel() for p in parts)
        sizes = [(numel * parts[0].element_size(), parts[0].dim())] if len(names) == 1 else \
            traced.quantized_sizes(twin, name, parts)
        for array_name, (size, ndim) in zip(names, sizes, strict=True):
            if devices > 1:
                split = any(tensor_parallel.weight_spec(array_name, ndim, config, devices))
                total += size if split else size * devices
            elif len(names) > 1 or len(parts) > 1 or not device.current().shares_with_jax(parts[0]):
                total += size
    return total


_ENGINES: weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple[int, str], Engine]] = weakref.WeakKeyDictionary()
_ENGINES_LOCK = threading.Lock()


def engine_for(model: PreTrainedModel, devices: int, weights: str = "fp32") -> tuple[Engine, bool]:
    """The model's engine for `devices` devices and `weights` precision, and whether it already existed
    (weights already moved)."""
    disk_cache.enable()
    with _ENGINES_LOCK:
        per_model = _ENGINES.setdefault(model, {})
        if (devices, weights) in per_model:
            return per_model[devices, weights], True
        engine = Engine(model, devices, weights)
        per_model[devices, weights] = engine
        return engine, False


def drop_programs(models: list[PreTrainedModel]) -> None:
    """Every compiled program of these models' engines, dropped from memory: the next request compiles them or
    loads them from the disk cache (the tests between files; the compile bench before each cell)."""
    for model in models:
        for engine in engines_of(model):
            engine.programs.clear()


def engines_of(model: PreTrainedModel) -> list[Engine]:
    """The model's engines (one per device count and precision it ran on); none if it never ran on JAX."""
    with _ENGINES_LOCK:
        return list(_ENGINES.get(model, {}).values())

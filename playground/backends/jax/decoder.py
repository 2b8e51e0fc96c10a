"""JAX path: a torchax-traced HF model, jitted prefill and a multi-step decode loop over a static cache.

generate() is the backend entry the runner calls. The prompt is padded on the right to a power-of-two
bucket (causal attention keeps padding out of the real positions, and decoding starts at the true length,
overwriting it), so a new prompt length rarely compiles. Each decode call runs up to STEPS_PER_CALL steps
in a lax.while_loop that stops at EOS, then hands that chunk of tokens to the host: one host sync per
chunk, not per token. Attention reads the whole static cache, so a long run does not start with a cache
sized for its end: it starts at a power-of-two length (at least GROWTH_FLOOR) that holds the prompt and
grows, doubling (one copy each time), as decoding fills it; each length compiles its decode program once.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import jax
import numpy as np
import torch

from playground.backends.jax import kv_cache, sampling
from playground.backends.jax.engine import Engine, engine_for
from playground.events import EmitTokens, GenerationOutput, ShouldStop
from playground.models.catalog import LoadedModel
from playground.spec import RunSpec

STEPS_PER_CALL = 8  # tokens per decode call: the streaming chunk, and the Python overhead divisor
MIN_PREFILL_BUCKET = 16
MIN_CACHE_LENGTH = 64
# Caches start at least this long: below it attention is cheap next to the weights, and every extra length
# is one more decode program to trace and compile; past it, growing as decoding fills the cache pays (a
# 512-token run decodes ~14% faster than over a cache sized for its end from the start).
GROWTH_FLOOR = 256

# One JAX generation at a time: on 2 cores two would only slow each other and falsify both timings.
_LOCK = threading.Lock()


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def prefill_bucket(prompt_len: int) -> int:
    """Padded prompt length: a power of two, at least MIN_PREFILL_BUCKET."""
    return max(MIN_PREFILL_BUCKET, _next_power_of_two(prompt_len))


def cache_length(prompt_len: int, max_new_tokens: int) -> int:
    """Static cache length: room for the padded prompt and every new token, rounded up to a power of two."""
    needed = max(prefill_bucket(prompt_len), prompt_len + max_new_tokens)
    return max(MIN_CACHE_LENGTH, _next_power_of_two(needed))


def cache_lengths(prompt_len: int, max_new_tokens: int) -> list[int]:
    """The cache lengths a request steps through: doubling from the smallest that holds the padded prompt
    and the first chunk (at least GROWTH_FLOOR), up to cache_length(). Attention reads the whole cache."""
    final = cache_length(prompt_len, max_new_tokens)
    first = max(GROWTH_FLOOR, _next_power_of_two(max(prefill_bucket(prompt_len), prompt_len + STEPS_PER_CALL)))
    lengths = [min(first, final)]
    while lengths[-1] < final:
        lengths.append(lengths[-1] * 2)
    return lengths


def eos_ids(loaded: LoadedModel) -> tuple[int, ...]:
    """The ids generate() stops at: the generation config's, else the tokenizer's."""
    eos = getattr(loaded.model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = getattr(loaded.tokenizer, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(sorted({int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}))


def generate(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
             should_stop: ShouldStop) -> GenerationOutput:
    """Prefill, then decode in chunks, streaming each chunk through `emit` as it reaches the host.

    `spec` is already validated: RunSpec refuses what this path cannot run (compatibility.py).
    """
    with _LOCK:
        return _generate(loaded, input_ids, spec, emit, should_stop)


class _Programs:
    """Every compiled program a request needs, fetched (or compiled) before the prompt runs: a cold
    request's compile shows in its TTFT and in compile_s, never inside its decode rate."""

    def __init__(self, engine: Engine, bucket: int, lengths: list[int], mode: sampling.SamplingMode,
                 eos: tuple[int, ...], batch: int, decode: bool) -> None:
        self.compile_s = 0.0
        self.prefill = self._add(engine.prefill_program(bucket, lengths[0], batch))
        self.first = self._add(engine.start_program(bucket, lengths[0], mode, eos, batch))
        self.decoders: dict[int, Any] = {}
        self.growers: dict[int, Any] = {}
        for i, length in enumerate(lengths if decode else []):
            self.decoders[length] = self._add(engine.decode_program(length, STEPS_PER_CALL, mode, eos, batch))
            if i:
                self.growers[length] = self._add(engine.grow_program(lengths[i - 1], length, mode, batch))

    def _add(self, compiled: tuple[Any, float]) -> Any:
        program, seconds = compiled
        self.compile_s += seconds
        return program


def _generate(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec, emit: EmitTokens,
              should_stop: ShouldStop) -> GenerationOutput:
    start = time.perf_counter()
    engine, reused = engine_for(loaded.model, spec.devices)
    prompt = input_ids.detach().cpu().numpy().astype(np.int32)  # (1, T)
    batch, prompt_len = prompt.shape
    bucket = prefill_bucket(prompt_len)
    lengths = cache_lengths(prompt_len, spec.max_new_tokens)
    mode = sampling.mode_for(spec, engine.vocab_size)
    eos = eos_ids(loaded)
    programs = _Programs(engine, bucket, lengths, mode, eos, batch, decode=spec.max_new_tokens > 1)

    padded = np.zeros((batch, bucket), np.int32)  # right padding: causal masking keeps it out of real tokens
    padded[:, :prompt_len] = prompt
    ids, true_len = engine.put(padded), engine.put(np.int32(prompt_len))
    knobs = engine.put(sampling.knobs_for(spec))
    length = lengths[0]
    cache = engine.new_cache(length)
    logits, cache = programs.prefill(engine.weights, cache, ids, true_len)
    state, info = programs.first(logits, ids, true_len, engine.put(jax.random.PRNGKey(spec.seed)), knobs, cache)
    first, info = jax.device_get((state.token, info))
    tokens = [int(first[0])]
    token_info = _records(info, 1)
    token_times = [time.perf_counter()]
    kv_trace = [kv_cache.cache_bytes(state.cache)]
    emit(tokens[:])

    calls, stopped = 0, False
    done = tokens[-1] in eos
    limits: dict[int, jax.Array] = {}
    while programs.decoders and not done and len(tokens) < spec.max_new_tokens:
        if should_stop():
            stopped = True
            break
        limit = min(STEPS_PER_CALL, spec.max_new_tokens - len(tokens))
        while prompt_len + len(tokens) - 1 + limit > length:  # this chunk writes past the cache: grow it
            length *= 2
            state = programs.growers[length](state)
        if limit not in limits:
            limits[limit] = engine.put(np.int32(limit))
        state, out, count = programs.decoders[length](engine.weights, state, limits[limit], knobs)
        out, count = jax.device_get((out, count))  # the one host sync of this chunk
        now = time.perf_counter()
        chunk = [int(t) for t in out.tokens[: int(count)]]
        token_info += _records(out.info, len(chunk))
        calls += 1
        tokens += chunk
        token_times += [now] * len(chunk)
        kv_trace += [kv_cache.cache_bytes(state.cache)] * len(chunk)
        emit(chunk)
        done = not chunk or chunk[-1] in eos
    return GenerationOutput(
        sequences=[tokens],
        start_time=start,
        token_times=token_times,
        kv_cache_bytes=kv_cache.cache_bytes(state.cache),
        compile_s=programs.compile_s,
        forward_passes=len(tokens),  # the prefill gave the first token, one decode step each of the rest
        stopped=stopped,
        kv_trace=kv_trace,
        token_info=token_info,
        extra=_extra(engine, reused, bucket, lengths[: lengths.index(length) + 1], calls),
    )


def _records(info: sampling.TokenInfo, count: int) -> list[dict[str, Any]]:
    """The first `count` host TokenInfo rows as the records the token view reads (see GenerationOutput)."""
    rows = zip(info.p[:count], info.entropy[:count], info.top_ids[:count], info.top_p[:count], strict=True)
    return [{"p": float(p), "entropy": float(h), "top": list(zip(ids.tolist(), probs.tolist(), strict=True))}
            for p, h, ids, probs in rows]


def _extra(engine: Engine, reused: bool, bucket: int, lengths: list[int], calls: int) -> dict[str, Any]:
    return {
        "prefill_bucket": bucket,
        "cache_length": lengths[-1],
        "cache_lengths": lengths,
        "steps_per_call": STEPS_PER_CALL,
        "decode_calls": calls,
        "weights_moved_s": 0.0 if reused else round(engine.move_s, 3),
        "device_weight_bytes": engine.weight_bytes,
        "compiled_programs": len(engine.compiled),
        **engine.sharding_info,
    }

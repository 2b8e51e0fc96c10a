"""The JAX model's next-token log-probabilities along a given token sequence: what a weight precision costs in
quality (KL against fp32), measured on the engine that decodes.

The prompt goes through the prefill program, then one jitted scan steps the traced model's decoder (the model
without its output head) through the given tokens with a static cache, and the head runs once over all of the
scan's hidden states. One product of many rows reads the head's weights once where a head per step reads them
at every step: Gemma3's 262k-token head is most of a step's bytes (teacher-forcing 64 tokens: 3.0 s -> 1.4 s,
AMD EPYC). The head runs through the model's own forward, with the decoder standing aside, so whatever the model
does after its head (Gemma2's soft cap, Cohere's logit scale) is done. The scan is compiled once per engine and
cache layout; the token count is padded to a power of two, so outputs of nearby lengths share it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch import nn
from torchax import interop
from transformers import PreTrainedModel

from playground.backends.jax.caches.plan import plan_cache, prefill_bucket
from playground.backends.jax.caches.pytree import JaxCache
from playground.backends.jax.engine.engine import Engine, engine_for
from playground.models.loaded import LoadedModel

_SCANS: weakref.WeakKeyDictionary[Engine, Any] = weakref.WeakKeyDictionary()


class _DecoderOutput:
    """The decoder's output as the head's forward reads it: the hidden states, and None for anything else
    (cache, attentions, router logits), whatever output class the model's own decoder returns."""

    def __init__(self, hidden: torch.Tensor) -> None:
        self.last_hidden_state = hidden

    def __getattr__(self, name: str) -> None:  # only asked for names not set above
        return None

    def __getitem__(self, index: int) -> torch.Tensor:
        if index != 0:
            raise IndexError(index)
        return self.last_hidden_state


class _GivenHidden(nn.Module):
    """Stands in for the decoder while the head runs: hands back hidden states computed before."""

    def __init__(self, hidden: torch.Tensor) -> None:
        super().__init__()
        self.hidden = hidden

    def forward(self, *args: Any, **kwargs: Any) -> _DecoderOutput:
        return _DecoderOutput(self.hidden)


def _decoder_name(module: nn.Module) -> str:
    """The attribute holding the model's decoder (`model`, GPT-2's `transformer`, ...): its base model prefix."""
    return cast(PreTrainedModel, module).base_model_prefix


def _split_weights(engine: Engine, weights: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The weights split into the decoder's (names relative to it) and the rest (the head's, full names)."""
    prefix = f"{_decoder_name(engine.twin.module)}."
    decoder = {name[len(prefix):]: w for name, w in weights.items() if name.startswith(prefix)}
    return decoder, {name: w for name, w in weights.items() if not name.startswith(prefix)}


def _decoder_hidden(engine: Engine, decoder_weights: dict, cache: JaxCache, ids: jax.Array,
                    positions: jax.Array) -> tuple[jax.Array, JaxCache]:
    """The decoder's last hidden states (B, T, H) for `ids` at `positions`, and the updated cache (traced)."""
    decoder = getattr(engine.twin.module, _decoder_name(engine.twin.module))
    w, i, p = interop.torch_view((decoder_weights, ids, positions))
    with engine.env:
        out = torch.func.functional_call(decoder, w, (i,),
                                         {"position_ids": p, "past_key_values": cache, "use_cache": True},
                                         tie_weights=False)
        hidden = out.last_hidden_state
    engine.twin.clear()
    return interop.jax_view(hidden), cache


@contextmanager
def _decoder_standing_aside(module: nn.Module, hidden: torch.Tensor) -> Iterator[None]:
    name = _decoder_name(module)
    decoder = getattr(module, name)
    setattr(module, name, _GivenHidden(hidden))
    try:
        yield
    finally:
        setattr(module, name, decoder)


def _head_logits(engine: Engine, head_weights: dict, hidden: jax.Array) -> jax.Array:
    """Logits (B, T, V) of the model's head and whatever its forward does after it, for decoder hidden states
    (B, T, H) (traced, under the engine's tracing lock: the twin's decoder is swapped out meanwhile)."""
    w, h = interop.torch_view((head_weights, hidden))
    ids = torch.zeros(h.shape[:2], dtype=torch.int64)  # unread: the decoder standing in ignores them
    with engine.env, _decoder_standing_aside(engine.twin.module, h):
        logits = torch.func.functional_call(engine.twin.module, w, (ids,), {"logits_to_keep": 0},
                                            tie_weights=False).logits
    return interop.jax_view(logits)


def _scan(engine: Engine) -> Any:
    """The engine's jitted teacher-forced scan, made once per engine (held weakly, so it goes with the engine)."""
    known = _SCANS.get(engine)
    if known is not None:
        return known
    engine_ref = weakref.ref(engine)

    @jax.jit
    def steps(weights: dict, cache: Any, tokens: jax.Array, prompt_len: jax.Array) -> tuple[jax.Array, Any]:
        alive = engine_ref()
        assert alive is not None  # a scan is only called through its live engine
        decoder_weights, head_weights = _split_weights(alive, weights)

        def body(cache: Any, xs: tuple[jax.Array, jax.Array]) -> tuple[Any, jax.Array]:
            token, position = xs
            hidden, cache = _decoder_hidden(alive, decoder_weights, cache, token[None, None], position[None, None])
            return cache, hidden[0, -1]

        positions = prompt_len + jnp.arange(tokens.shape[0], dtype=jnp.int32)
        cache, hidden = jax.lax.scan(body, cache, (tokens, positions))  # hidden: (N, H)
        return _head_logits(alive, head_weights, hidden[None])[0], cache

    _SCANS[engine] = steps
    return steps


def logprobs_along(loaded: LoadedModel, spec: Any, prompt_ids: Sequence[int], new_ids: list[int],
                   room: int = 0) -> torch.Tensor:
    """Log-probabilities (len(new_ids), V) of the token after the prompt and after each new token but the last,
    from the engine for spec's weights and devices, with spec's cache laid out at its final length. `room`: lay
    the cache out for a prompt this long (at least the real one), so prompts of different lengths share one
    layout and one compiled scan; the slots past the prompt's own length are masked, as a growing cache's are."""
    engine, _ = engine_for(loaded.model, spec.devices, spec.weights)
    prompt_len, count = len(prompt_ids), len(new_ids)
    padded_count = 1 << max(0, count - 2).bit_length()  # the scan's length: count - 1 tokens, padded
    plan = plan_cache(spec.replace(max_new_tokens=max(spec.max_new_tokens, padded_count + 1)), engine.config,
                      max(prompt_len, room), 1)
    prefill = engine.prefill_program(prefill_bucket(prompt_len), plan.at(plan.lengths[-1]))
    padded = np.zeros((1, prefill_bucket(prompt_len)), np.int32)
    padded[0, :prompt_len] = prompt_ids
    first, cache = prefill(engine.weights, jnp.asarray(padded), jnp.int32(prompt_len))
    return scan_logprobs(engine, np.asarray(first), cache, prompt_len, new_ids)


def scan_logprobs(engine: Engine, first: np.ndarray, cache: JaxCache, prompt_len: int,
                  new_ids: list[int]) -> torch.Tensor:
    """Log-probabilities (len(new_ids), V): `first`, the logits after the prompt (1, V), then the scan's after
    each new token but the last, through `cache` (laid out with room for the scan's padding)."""
    count = len(new_ids)
    rows = [first]
    if count > 1:
        tokens = np.zeros(1 << max(0, count - 2).bit_length(), np.int32)  # count - 1 tokens, padded
        tokens[: count - 1] = new_ids[:-1]
        with engine.tracing():  # a first call traces the model; a compile left running by a stopped request may too
            rest, _ = _scan(engine)(engine.weights, cache, jnp.asarray(tokens), jnp.int32(prompt_len))
        rows.append(np.asarray(rest)[: count - 1])
    return torch.log_softmax(torch.from_numpy(np.concatenate(rows)).float(), dim=-1)


def logprobs_through_cache(loaded: LoadedModel, spec: Any, text_ids: Sequence[int],
                           chunk: int) -> Iterator[torch.Tensor]:
    """Log-probabilities of the token after each position of `text_ids` but the last, through spec's cache laid
    out for the whole text, as decoding writes it: the first token is a one-token prompt (the prefill program),
    every later one a single step of the scan, `chunk` steps per call with the cache carried from call to call.
    Yields the first call's chunk + 1 rows (the prefill's row too), then `chunk` rows a call (the last fewer). Only
    the last call is padded: a padded step would move the layers' write counters past the next real token."""
    engine, _ = engine_for(loaded.model, spec.devices, spec.weights)
    tokens = np.asarray(text_ids, np.int32)  # (N,)
    count = len(tokens)
    plan = plan_cache(spec, engine.config, count + chunk, 1)  # room for the last call's padding
    layouts = plan.at(plan.lengths[-1])
    bucket = prefill_bucket(1)
    prompt = np.zeros((1, bucket), np.int32)
    prompt[0, 0] = tokens[0]
    first, cache = engine.prefill_program(bucket, layouts)(engine.weights, jnp.asarray(prompt), jnp.int32(1))
    rows = [np.asarray(first)]  # (1, V): the row of position 0
    for start in range(1, count - 1, chunk):
        real = tokens[start: min(start + chunk, count - 1)]
        piece = np.zeros(chunk, np.int32)
        piece[: len(real)] = real
        with engine.tracing():  # a first call traces the model
            logits, cache = _scan(engine)(engine.weights, cache, jnp.asarray(piece), jnp.int32(start))
        rows.append(np.asarray(logits)[: len(real)])
        yield torch.log_softmax(torch.from_numpy(np.concatenate(rows)).float(), dim=-1)
        rows = []
    if rows:  # a two-token text: the prefill's row is all there is
        yield torch.log_softmax(torch.from_numpy(np.concatenate(rows)).float(), dim=-1)

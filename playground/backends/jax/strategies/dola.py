"""DoLa (decoding by contrasting layers) as a plug-in of the JAX request loop, with transformers 4.52.4's arithmetic
(the PyTorch port, backends/torch/dola.py, says which of 4.52's behaviours are matched and why).

Each step's one forward also reads the candidate premature layers through the output head (Engine.forward_layers,
inside the same jitted call): the final layer's log-probabilities minus the chosen layer's, over the tokens within
a tenth of the final top's probability, go through the logits chain, then argmax. With several candidates the
layer furthest from the final one (Jensen-Shannon) is chosen, per step. Chunks of STEPS_PER_CALL steps per call,
as plain decoding; each token's record carries the layer, every candidate's divergence and the final layer's own
top token, as on the PyTorch path, and, as there, the final layer's probabilities as the model's own with the
contrast as a stage of its own ahead of the chain (what it removed and the mass it moved).
"""

from __future__ import annotations

import math
from functools import partial
from types import SimpleNamespace
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from playground.backends.dola_layers import CONTRAST_STAGE, candidate_layers, requested
from playground.backends.jax.caches.plan import CachePlan, Layouts
from playground.backends.jax.caches.pytree import JaxCache
from playground.backends.jax.chain import token_choice
from playground.backends.jax.chain.chain import Context, pushed, start_history
from playground.backends.jax.chain.token_choice import ChainArgs, SamplingMode, StepInfo
from playground.backends.jax.engine import prefill
from playground.backends.jax.engine.compiling import Pending
from playground.backends.jax.engine.engine import Engine
from playground.backends.jax.engine.kernel import Kernel, abstract
from playground.backends.jax.strategies.plain import PlainDecoding
from playground.backends.jax.strategies.plain_programs import Chunk, DecodeState, ended, finished
from playground.backends.jax.strategy import Advance, Request, Run
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec

RELATIVE_TOP = 0.1  # 4.52's `_relative_top_filter`: keep tokens with p_final >= RELATIVE_TOP * max p_final
BASE_FILTER_VALUE = -1e-3  # the premature layer's log-probability where the final one was cut


class Contrast(NamedTuple):
    """What decided one step, per row: the layer used (its index among the candidates), every candidate's JS
    divergence from the final layer, and the final layer's own top token."""

    chosen: jax.Array  # (B,) int32 index into the candidate layers
    js: jax.Array  # (B, L)
    final_top: jax.Array  # (B,) int32


def js_divergences(final: jax.Array, premature: jax.Array) -> jax.Array:
    """(L, B): each candidate's JS divergence from the final layer, KL terms averaged over the vocabulary (torch's
    kl_div with reduction 'none', then mean, as 4.52)."""
    average = 0.5 * (jax.nn.softmax(final, axis=-1)[None] + jax.nn.softmax(premature, axis=-1))

    def kl(log_input: jax.Array) -> jax.Array:
        return (jax.scipy.special.xlogy(average, average) - average * log_input).mean(axis=-1)

    return 0.5 * (kl(jax.nn.log_softmax(final, axis=-1)[None]) + kl(jax.nn.log_softmax(premature, axis=-1)))


def contrasted(final: jax.Array, base: jax.Array) -> jax.Array:
    """4.52's relative-top filter and the difference: log p_final - log p_base within log(RELATIVE_TOP) of the
    final top, -inf elsewhere (where the base is set to BASE_FILTER_VALUE first)."""
    final_logp = jax.nn.log_softmax(final, axis=-1)
    base_logp = jax.nn.log_softmax(base, axis=-1)
    top = final_logp.max(axis=-1, keepdims=True)
    cut = final_logp < jnp.minimum(top, top + math.log(RELATIVE_TOP))
    return jnp.where(cut, -jnp.inf, final_logp) - jnp.where(cut, BASE_FILTER_VALUE, base_logp)


def choose(final: jax.Array, premature: jax.Array, key: jax.Array, produced: jax.Array, history: Any,
           mode: SamplingMode, args: ChainArgs) -> tuple[jax.Array, jax.Array, StepInfo, Contrast]:
    """final (B, V) and the candidates' logits (L, B, V) -> the token, the key, its StepInfo and the contrast."""
    final, premature = final.astype(jnp.float32), premature.astype(jnp.float32)
    js = js_divergences(final, premature)  # (L, B)
    chosen = jnp.argmax(js.mean(axis=-1)).astype(jnp.int32)  # one layer for the batch, as 4.52
    # the final layer's logits are the model's own: the contrast is recorded as a stage ahead of the chain;
    # DoLa never samples, so no stage of its chain carries a state to settle
    token, key, info, _ = token_choice.select(contrasted(final, premature[chosen]), key, produced, history, mode,
                                          args, model_logits=final)
    batch = final.shape[0]
    record = Contrast(jnp.full((batch,), chosen), js.T, jnp.argmax(final, axis=-1).astype(jnp.int32))
    return token, key, info, record


def _prefill(engine: Engine, weights: dict, ids: jax.Array, length: jax.Array, *, layouts: Layouts,
             layers: tuple[int, ...]) -> tuple[tuple[jax.Array, jax.Array], JaxCache]:
    """The padded prompt into a new cache; ((final logits (B, V), candidates' logits (L, B, V)) at the last real
    position, cache)."""
    def step(cache: JaxCache, chunk: jax.Array, positions: jax.Array, keep: jax.Array) -> tuple:
        logits, _, heads, cache = engine.forward_layers(weights, cache, chunk, positions, keep, heads=layers)
        return (logits[:, -1], jnp.stack([h[:, -1] for h in heads])), (), cache

    outputs, _, cache = prefill.prefill(step, ids, length, layouts, engine.constrain)  # in chunks: prefill.py
    return outputs, cache


def start(vocab_size: int, mode: SamplingMode, eos: tuple[int, ...], outputs: tuple[jax.Array, jax.Array],
          ids: jax.Array, length: jax.Array, key: jax.Array, args: ChainArgs,
          cache: JaxCache) -> tuple[DecodeState[jax.Array], Chunk]:
    history = start_history(ids, length, mode.needs, vocab_size)
    token, key, info, record = choose(*outputs, key, jnp.int32(0), history, mode, args)
    state = DecodeState(cache, token, length.astype(jnp.int32), key, pushed(history, token, mode.needs),
                        ended(token, eos), jnp.int32(1))
    return state, Chunk(token, info, record)


def step(engine: Engine, mode: SamplingMode, eos: tuple[int, ...], layers: tuple[int, ...], weights: dict,
         s: DecodeState[jax.Array], args: ChainArgs) -> tuple[DecodeState[jax.Array], Chunk]:
    """One DoLa step: plain decoding's, with the candidate layers read through the head."""
    logits, _, heads, cache = engine.forward_layers(weights, s.cache, s.token[:, None], s.position[None, None], 1,
                                                    heads=layers)
    premature = jnp.stack([h[:, -1] for h in heads])
    token, key, info, record = choose(logits[:, -1], premature, s.key, s.produced, s.history, mode, args)
    state = DecodeState(cache, token, s.position + 1, key, pushed(s.history, token, mode.needs), ended(token, eos),
                        s.produced + 1)
    return state, jax.tree.map(lambda a: a[0], Chunk(token, info, record))


def empty(mode: SamplingMode, layers: tuple[int, ...], steps: int) -> Chunk:
    contrast = Contrast(jnp.zeros((steps,), jnp.int32), jnp.zeros((steps, len(layers))),
                        jnp.zeros((steps,), jnp.int32))
    return Chunk(jnp.full((steps,), -1, jnp.int32), token_choice.empty_info(steps, 1 + len(mode.chain.stages)),
                 contrast)


def dola_kernel(engine: Engine, bucket: int, mode: SamplingMode, eos: tuple[int, ...],
                layers: tuple[int, ...]) -> Kernel[DecodeState]:
    """DoLa's programs: plain decoding's state, the layers read at every step."""
    vocab = engine.vocab_size
    prefilled = (engine.shape_struct((1, vocab), jnp.float32), engine.shape_struct((len(layers), 1, vocab),
                                                                                  jnp.float32))
    return Kernel(engine=engine, name="dola", mode=(mode, eos, layers), bucket=bucket,
                  start=partial(start, vocab, mode, eos), step=partial(step, engine, mode, eos, layers),
                  empty=partial(empty, mode, layers), finished=finished,
                  args=abstract(engine, token_choice.arg_specs(mode)), prefilled=prefilled, shapes=mode.needs)


class DolaDecoding(PlainDecoding):
    """Plain decoding's args, stream, constraint and output, with DoLa's programs and records."""

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec, samples=False)
        self.layers: tuple[int, ...] = ()
        self.contrasts: list[dict[str, Any]] = []  # per token: what decided it (TokenInfo's `dola`)

    def bind(self, engine: Engine, prompt_len: int, bucket: int,
             context: Context) -> tuple[CachePlan, list[Pending]]:
        config = SimpleNamespace(config=engine.config)
        self.layers = tuple(candidate_layers(config, requested(self.spec.dola_layers)))
        plan, own = super().bind(engine, prompt_len, bucket, context)
        self.kernel = dola_kernel(engine, bucket, self.mode, self.eos, self.layers)
        return plan, own

    def prefill_program(self, engine: Engine, bucket: int, layouts: Layouts) -> Pending:
        """The engine's prefill program, handing the start the candidate layers' logits too."""
        return engine.prefill_program(bucket, layouts, own=partial(_prefill, engine, layers=self.layers),
                                      key=("dola", self.layers))

    def read(self, request: Request, run: Run, fetched: Any, now: float) -> Advance:
        advance = super().read(request, run, fetched, now)
        record = fetched[0].own  # the Contrast
        for row, known in enumerate(self.stream.info[len(self.stream.info) - advance.count:]):
            known["dola"] = {"layer": self.layers[int(record.chosen[row])], "layers": list(self.layers),
                             "js": [float(v) for v in record.js[row]], "final_top": int(record.final_top[row])}
        return advance

    def stage_names(self) -> tuple[str, ...]:
        return (CONTRAST_STAGE, *super().stage_names())

    def outcome(self, request: Request, run: Run) -> dict[str, Any]:
        return {**super().outcome(request, run), "extra": {"dola_layers": list(self.layers)}}


def dola(spec: RunSpec, draft: LoadedModel | None = None) -> DolaDecoding:
    """Strategy "dola": the final layer contrasted with the premature layer furthest from it."""
    return DolaDecoding(spec)

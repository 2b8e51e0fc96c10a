"""The JAX path split over several devices, for tests/unit/test_on_a_mesh.py: one JSON object, each function's
report under its name.

The device count is fixed when JAX starts, so these run in a fresh Python; one for all of them imports the
libraries once (six processes took 83 s of CPU, one 68 s, AMD EPYC 2 cores). Needs
XLA_FLAGS=--xla_force_host_platform_device_count=4 (or more) in the environment."""

import json
import os
from typing import Any

from playground.backends.jax import decoder as jax_decoder
from playground.backends.jax.backend import JaxBackend
from playground.backends.jax.engine import engine as jax_engine
from playground.spec import RunSpec
from tests.helpers import (
    new_device_bytes,
    same_weights_other_tokenizer,
    tiny_gemma,
    tiny_llama,
    tiny_loaded,
    tiny_programs_at_o0,
)


def decoder() -> dict:
    """The JAX decoder on 1, 2 and 4 devices (Gemma3 on 1 and 2: its 4-way split is Llama's), greedy and sampled,
    with how q_proj is split."""
    ids = [5, 17, 42, 99, 3]
    report: dict[str, Any] = {}
    for name, model in (("llama", tiny_llama()), ("gemma", tiny_gemma())):
        loaded = tiny_loaded(name, model)
        for n in (1, 2, 4) if name == "llama" else (1, 2):
            for strategy in ("greedy", "sampling"):
                spec = RunSpec(backend="jax", cache="dynamic", strategy=strategy, seed=5, max_new_tokens=64,
                               min_new_tokens=64, devices=n)  # 5 + 64 tokens: the cache grows 64 -> 128
                out = jax_decoder.generate(loaded, ids, spec, lambda c: None, lambda: False)
                report[f"{name}-{n}-{strategy}"] = out.sequences[0]
            engine, _ = jax_engine.engine_for(model, n)
            q = engine.weights["model.layers.0.self_attn.q_proj.weight" if n > 1 else "model.embed_tokens.weight"]
            report[f"{name}-{n}-shards"] = len({s.device for s in q.addressable_shards})
            report[f"{name}-{n}-shard-rows"] = q.addressable_shards[0].data.shape[0]
    return report


def caches() -> dict:
    """The sliding, sink and quantized JAX caches on 1 and 2 devices, and whether their KV heads were split (the
    decoder's own test splits Llama 4 ways)."""
    ids = [5, 17, 42, 99, 3]
    loaded = tiny_loaded("llama", tiny_llama(num_key_value_heads=4))  # 4 KV heads: 2 and 4 devices split them
    runs: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [("sliding", {"window": 8}, ("greedy",)),
            ("sink", {"window": 8, "sink_tokens": 2}, ("greedy", "sampling")),
            ("quantized", {"cache_bits": 4, "residual_length": 8}, ("greedy", "sampling"))]
    report = {}
    for cache, knobs, strategies in runs:
        for strategy in strategies:
            for n in (1, 2):
                spec = RunSpec(backend="jax", cache=cache, strategy=strategy, seed=5, max_new_tokens=32,
                               min_new_tokens=32, devices=n, **knobs)  # 5 + 32 tokens: four windows of 8
                out = jax_decoder.generate(loaded, ids, spec, lambda c: None, lambda: False)
                report[f"{cache}-{strategy}-{n}"] = out.sequences[0]
                report[f"{cache}-{strategy}-{n}-kv-split"] = out.extra.get("kv_heads", "one device")
    return report


def assisted() -> dict:
    """JAX assisted decoding (prompt lookup, a draft model, sampled, over a sink cache) with the main model on
    1 and 2 devices."""
    main_model, draft = tiny_loaded("m", tiny_llama()), tiny_loaded("d", tiny_llama(seed=5, num_hidden_layers=1))
    ids = [5, 17, 42, 99, 3, 5, 17, 42, 99, 3, 8, 9]
    base = RunSpec(backend="jax", cache="dynamic", max_new_tokens=40, min_new_tokens=40)
    report = {}
    for n in (1, 2):
        for name, extra in (("lookup", {"prompt_lookup": 5}), ("draft", {"assistant": "d"}),
                            ("sampled", {"assistant": "d", "assisted_sampling": True, "seed": 4}),
                            ("sink", {"prompt_lookup": 5, "cache": "sink", "window": 16, "sink_tokens": 4})):
            spec = base.replace(strategy="assisted", devices=n, **extra)
            out = JaxBackend().generate(main_model, ids, spec, lambda c: None, lambda: False,
                                        draft if "assistant" in extra else None)
            report[f"{name}-{n}"] = out.sequences[0]
    return report


def beam() -> dict:
    """JAX beam search on 1 and 2 devices, static and sliding caches: sequences, scores, and whether the beams'
    caches were split."""
    ids = [5, 17, 42, 99, 3]
    loaded = tiny_loaded("llama", tiny_llama(num_key_value_heads=4))  # 4 KV heads: 2 devices split them
    report = {}
    runs: tuple[tuple[str, dict[str, Any]], ...] = (("static", {}), ("sliding", {"window": 8}))
    for cache, knobs in runs:
        for n in (1, 2):
            spec = RunSpec(backend="jax", strategy="beam", num_beams=3, num_return_sequences=2, cache=cache,
                           max_new_tokens=16, min_new_tokens=16, devices=n, **knobs)
            out = jax_decoder.generate(loaded, ids, spec, lambda c: None, lambda: False)
            assert out.scores is not None  # beam search scores its sequences
            report[f"{cache}-{n}"] = {"sequences": out.sequences, "scores": [round(s, 4) for s in out.scores],
                                      "split": out.extra.get("kv_heads", "one device")}
    return report


def guide() -> dict:
    """The guide's methods (beam sampling, diverse beam search, contrastive search, DoLa) and universal assisted
    decoding on 1 and 2 devices: sequences (and scores where the method has them)."""
    ids = [5, 17, 42, 99, 3, 5, 17, 42]
    loaded = tiny_loaded("llama", tiny_llama(num_key_value_heads=4))  # 4 KV heads: 2 devices split them
    methods: tuple[tuple[str, dict[str, Any]], ...] = (
        ("beam_sample", {"num_beams": 3, "temperature": 1.0, "seed": 2}),
        ("diverse_beam", {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1.0}),
        ("contrastive", {"penalty_alpha": 0.6, "top_k": 4}),
        ("dola", {"dola_layers": "0", "repetition_penalty": 1.2}))
    report: dict[str, Any] = {}
    for n in (1, 2):
        for strategy, knobs in methods:
            spec = RunSpec(backend="jax", cache="dynamic", strategy=strategy, max_new_tokens=16, min_new_tokens=16,
                           devices=n, **knobs)
            out = jax_decoder.generate(loaded, ids, spec, lambda c: None, lambda: False)
            report[f"{strategy}-{n}"] = {"sequences": out.sequences,
                                         "scores": [round(s, 4) for s in out.scores or []]}
        main_model = tiny_loaded("m", tiny_llama(0))
        spec = RunSpec(backend="jax", cache="dynamic", strategy="assisted", assistant="other", max_new_tokens=16,
                       min_new_tokens=16, devices=n)
        out = JaxBackend().generate(main_model, ids, spec, lambda c: None, lambda: False,
                                    same_weights_other_tokenizer())
        report[f"universal-{n}"] = {"sequences": out.sequences, "scores": []}
    return report


def int8() -> dict:
    """int8 weights on the JAX decoder over 1 and 2 devices: tokens, how a scale is split, the engine's bytes."""
    ids = [5, 17, 42, 99, 3, 5, 17, 42, 99, 3]
    model = tiny_llama()
    loaded = tiny_loaded("tiny-llama", model)
    report: dict[str, Any] = {}
    for strategy, devices, lookup in (("greedy", 1, 0), ("greedy", 2, 0), ("assisted", 2, 3)):
        spec = RunSpec(backend="jax", cache="static", weights="int8", strategy=strategy, max_new_tokens=24,
                       min_new_tokens=24, devices=devices, prompt_lookup=lookup)
        report[f"{strategy}-{devices}"] = jax_decoder.generate(loaded, ids, spec, lambda c: None,
                                                               lambda: False).sequences[0]
    engine, _ = jax_engine.engine_for(model, 2, "int8")
    scale = engine.weights["model.layers.0.self_attn.q_proj.scale"]
    report["q-rows"] = scale.shape[0]
    report["q-scale-shard-rows"] = scale.addressable_shards[0].data.shape[0]
    report["estimate"] = jax_engine.device_bytes(model, 2, "int8")
    report["measured"] = new_device_bytes(engine, model)
    return report


def engine_bytes() -> dict:
    """The JAX engine's device-bytes estimate against what it allocates, on 2 and 4 devices."""
    model = tiny_llama(num_key_value_heads=1)  # one KV head: k/v cannot split and are replicated
    report = {}
    for n in (2, 4):
        report[n] = [jax_engine.device_bytes(model, n), new_device_bytes(jax_engine.engine_for(model, n)[0], model)]
    return report


def main() -> None:
    """Every report, or those named in $MESH_REPORTS (comma-separated)."""
    tiny_programs_at_o0()
    reports = (decoder, caches, assisted, beam, guide, int8, engine_bytes)
    named = os.environ.get("MESH_REPORTS")
    chosen = [r for r in reports if named is None or r.__name__ in named.split(",")]
    print(json.dumps({report.__name__: report() for report in chosen}))


if __name__ == "__main__":
    main()

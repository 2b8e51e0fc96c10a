"""The JAX backend as the runner sees it: its refusals from a config on disk, its memory, and the jitted
decoder (imported on use: importing this module imports neither torch nor jax)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from playground import registry
from playground.backends.base import (
    EmitTokens,
    GenerationOutput,
    Held,
    MemoryNeed,
    PreviewTokens,
    ReportProgress,
    ShouldStop,
)
from playground.backends.jax.engine.program_cache import program_cache_bound
from playground.backends.jax.model.architectures import check_architecture
from playground.models.memory import size_text
from playground.models.shapes import attention_shape, check_head_split

if TYPE_CHECKING:
    import torch

    from playground.backends.prefix_store import ReusePlan
    from playground.models.loaded import LoadedModel
    from playground.spec import RunSpec


class JaxBackend:
    """The torchax-traced model under jax.jit: prefill and chunked decode over fixed-shape caches."""

    name = "jax"

    def source_weights(self, spec: RunSpec) -> str:
        """Always fp32: the engine quantizes its own int8 copy from it (bitsandbytes layers do not trace)."""
        return "fp32"

    def preflight(self, spec: RunSpec, config: Mapping[str, Any] | None,
                  draft_config: Mapping[str, Any] | None) -> None:
        """An architecture this path does not run, or a device count that does not divide the heads (a draft of
        another tokenizer runs as universal assisted decoding)."""
        if config is None:
            return
        check_architecture(config)
        text = config.get("text_config") or config
        if isinstance(text.get("num_attention_heads"), int):
            check_head_split(text["num_attention_heads"], spec.devices)

    def memory_needed(self, loaded: LoadedModel, spec: RunSpec, prompt_tokens: int,
                      draft: LoadedModel | None) -> MemoryNeed:
        """The engine's device copy of the weights and the bound of its compiled programs (once per model and
        device count; both live as long as the model), and the cache's arrays as its plan allocates them:
        bounded layers at their bound, quantized arrays at their bytes, old and new arrays together while a
        growing cache doubles."""
        from playground.backends.jax.caches.plan import peak_bytes, plan_bytes, prefill_bucket
        from playground.backends.jax.decoder import plugin_for
        from playground.backends.jax.engine import prefill
        from playground.backends.jax.engine.engine import device_bytes
        from playground.backends.jax.strategies.assisted import AssistedDecoding

        total = prompt_tokens + spec.max_new_tokens
        strategy = registry.strategy(spec.strategy)
        # the plan the strategy's plug-in decodes over (assisted decoding's: room for the last verify pass)
        plugin = plugin_for(spec, draft)
        plan = plugin.plan(_text_config(loaded), prompt_tokens)
        rows = strategy.peak_rows(spec)  # contrastive search: its top_k candidates' rows, during every step
        need, growing = peak_bytes(plan, rows)
        first = plan.at(plan.lengths[0])  # the prefill fills the first layouts, holding its own arrays besides
        heads = attention_shape(_text_config(loaded)).heads
        working = prefill.working_bytes(first, prefill_bucket(prompt_tokens), heads)
        need, growing = (plan_bytes(first) + working, False) if plan_bytes(first) + working > need else (need, growing)
        resident = [(loaded, _engine_weights(loaded, spec, spec.devices, device_bytes)),
                    (loaded, _engine_programs(spec.devices))]
        if draft is not None:  # the draft's engine is its own, on one device; its cache is preallocated
            assert isinstance(plugin, AssistedDecoding), "a draft model comes with assisted decoding only"
            vocab = int(loaded.model.get_output_embeddings().weight.shape[0])
            need += peak_bytes(plugin.draft_plan(loaded.tokenizer, vocab, prompt_tokens))[0]
            resident += [(draft, _engine_weights(draft, spec, 1, device_bytes)), (draft, _engine_programs(1))]
        kind = "beams" if strategy.peak_rows_knob is None else "rows"
        what = f"the JAX {spec.cache} cache for {total} tokens" + (f" x {rows} {kind}" if rows > 1 else "") + (
            " (old and new arrays while it grows)" if growing else "") + (
            f" and its prefill's {size_text(working)} of working memory" if working > plan_bytes(first) else "")
        hint = f"lower {strategy.peak_rows_knob} or max_new_tokens" if strategy.peak_rows_knob else \
            "lower max_new_tokens"
        return MemoryNeed(Held(what, need, hint=hint), resident)

    def logprobs_along(self, loaded: LoadedModel, spec: RunSpec, prompt_ids: list[int],
                       new_ids: list[int]) -> torch.Tensor:
        """Through the engine for spec's weights, with a static cache (every position attended, as the fp32
        reference attends them)."""
        from playground.backends.jax.teacher_forced import logprobs_along
        from playground.registry.builtin import REFERENCE_CACHE
        from playground.spec import RunSpec

        static = RunSpec(model=spec.model, backend="jax", cache=REFERENCE_CACHE, weights=spec.weights,
                         devices=spec.devices, max_new_tokens=max(1, len(new_ids)))
        return logprobs_along(loaded, static, prompt_ids, new_ids)

    def logprobs_through_cache(self, loaded: LoadedModel, spec: RunSpec, text_ids: list[int], chunk: int,
                               progress: ReportProgress | None = None) -> Iterator[torch.Tensor]:
        from playground.backends.jax.decoder import announce_once
        from playground.backends.jax.engine.engine import compile_notices
        from playground.backends.jax.teacher_forced import logprobs_through_cache

        check_architecture(loaded.model.config)
        with compile_notices(announce_once(progress)):
            yield from logprobs_through_cache(loaded, spec, text_ids, chunk)

    def generate(self, loaded: LoadedModel, prompt_ids: list[int], spec: RunSpec, emit: EmitTokens,
                 should_stop: ShouldStop, draft: LoadedModel | None = None,
                 progress: ReportProgress | None = None, preview: PreviewTokens | None = None,
                 reuse: ReusePlan | None = None) -> GenerationOutput:
        from playground.backends.jax.decoder import announce_once, generate
        from playground.backends.jax.engine.engine import compile_notices

        check_architecture(loaded.model.config)
        with compile_notices(announce_once(progress)):
            return generate(loaded, prompt_ids, spec, emit, should_stop, draft, preview, reuse)

    def reuse_refusal(self, loaded: LoadedModel, spec: RunSpec) -> str | None:
        """Plain decoding over the dynamic and static caches on one device keeps and reuses its cache
        (prefix_reuse.py); the rest prefills the whole prompt."""
        from playground.backends.jax.prefix_reuse import refusal

        return refusal(spec, _text_config(loaded))


def _text_config(loaded: LoadedModel) -> Any:
    return loaded.model.config.get_text_config(decoder=True)


def _engine_weights(loaded: LoadedModel, spec: RunSpec, devices: int, device_bytes: Any) -> Held:
    precision = "" if spec.weights == "fp32" else f" ({spec.weights})"
    what = f"the JAX engine's weights{precision} on {devices} device{'s' if devices > 1 else ''}"
    return Held(what, device_bytes(loaded.model, devices, spec.weights),
                hint="use the torch backend, or unload other models")


def _engine_programs(devices: int) -> Held:
    what = f"the JAX engine's compiled programs on {devices} device{'s' if devices > 1 else ''}"
    return Held(what, program_cache_bound(), hint="lower PLAYGROUND_PROGRAM_CACHE, or unload other models")

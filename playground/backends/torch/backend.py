"""The PyTorch backend as the runner sees it: its refusals, its memory, and `model.generate` (imported on use)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
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
from playground.backends.torch import compiled, prefill
from playground.errors import PlaygroundError
from playground.models import memory
from playground.models.shapes import attention_shape

if TYPE_CHECKING:
    import torch

    from playground.backends.prefix_store import ReusePlan
    from playground.models.loaded import LoadedModel
    from playground.spec import RunSpec


class TorchBackend:
    """transformers' model.generate with our cache objects, streamer, probes and stop criterion."""

    name = "torch"

    def source_weights(self, spec: RunSpec) -> str:
        """transformers runs the weights as loaded: fp32, bf16, or bitsandbytes' int8 and nf4 layers."""
        return spec.weights

    def preflight(self, spec: RunSpec, config: Mapping[str, Any] | None,
                  draft_config: Mapping[str, Any] | None) -> None:
        """Everything transformers runs, this path runs: RunSpec's checks are the refusals, and torch.compile
        on a CPU without the C++ compiler its kernels are built with."""
        if spec.torch_compile != "off" and compiled.cpp_compiler() is None and compiled.on_cpu():
            raise PlaygroundError(f"torch_compile={spec.torch_compile!r} cannot run: {compiled.compiler_refusal()}")

    def memory_needed(self, loaded: LoadedModel, spec: RunSpec, prompt_tokens: int,
                      draft: LoadedModel | None) -> MemoryNeed:
        """The full-precision cache for prompt + max_new_tokens, a row per sequence (and the draft's)."""
        total = prompt_tokens + spec.max_new_tokens
        if spec.torch_compile != "off":
            from playground.backends.torch.caches.factory import compiled_length  # torch is loaded by now

            total = compiled_length(prompt_tokens, spec.max_new_tokens)
        strategy = registry.strategy(spec.strategy)
        sequences = strategy.peak_rows(spec)
        need = memory.kv_bytes_estimate(loaded.model.config, total, sequences)
        working = prefill.working_bytes(spec, prompt_tokens, attention_shape(loaded.model.config).heads) * sequences
        need += working
        if draft is not None:
            need += memory.kv_bytes_estimate(draft.model.config, total)
        working_text = f" and its prefill's {memory.size_text(working)} of working memory"
        held = Held(f"the KV cache for {total} tokens x {sequences} sequence(s)" + (
            working_text if working > need - working else ""), need)
        if strategy.peak_rows_knob:  # the rows are its candidates: fewer of them is the first thing to try
            held = Held(held.what, need, f"lower {strategy.peak_rows_knob} or max_new_tokens, pick smaller weights")
        return MemoryNeed(held)

    def logprobs_along(self, loaded: LoadedModel, spec: RunSpec, prompt_ids: list[int],
                       new_ids: list[int]) -> torch.Tensor:
        import torch

        from playground.backends.torch.reference import logprobs_along

        return logprobs_along(loaded.model, torch.tensor([prompt_ids]), new_ids)

    def logprobs_through_cache(self, loaded: LoadedModel, spec: RunSpec, text_ids: list[int], chunk: int,
                               progress: ReportProgress | None = None) -> Iterator[torch.Tensor]:
        import torch

        from playground.backends.torch.teacher_forced import logprobs_through_cache

        return logprobs_through_cache(loaded, spec, torch.tensor([text_ids]), chunk, progress)  # (1, N)

    def generate(self, loaded: LoadedModel, prompt_ids: list[int], spec: RunSpec, emit: EmitTokens,
                 should_stop: ShouldStop, draft: LoadedModel | None = None,
                 progress: ReportProgress | None = None, preview: PreviewTokens | None = None,
                 reuse: ReusePlan | None = None) -> GenerationOutput:
        # the preparations, counted as this path's compile time (outside every timing, like the JAX path's): the
        # quantized cache's kernels, built on first use, and under torch.compile the decode step's compile
        import torch

        from playground.backends.torch.generate import generate

        began = time.perf_counter()
        input_ids = torch.tensor([prompt_ids])  # (1, T)
        prepare = registry.cache_type(spec.cache).prepare.get("torch")
        build_s = prepare(spec, progress) if prepare is not None else 0.0
        compiling = spec.torch_compile != "off"
        if compiling:
            build_s += compiled.warm_up(loaded, input_ids.to(loaded.model.device), spec, progress)
        graphs = compiled.graphs_compiled() if compiling else 0
        with compiled.torchax_out_of_sight() if compiling else nullcontext():  # a step the warm-up missed compiles
            output = generate(loaded, input_ids, spec, emit, should_stop, draft, preview, reuse)
        if compiling:  # what the timed run compiled itself: nothing, where the warm-up covered its shapes
            output.extra["torch_compile"] = {"mode": spec.torch_compile,
                                             "graphs_compiled_in_run": compiled.graphs_compiled() - graphs}
        if build_s:  # the run's window opens before the build, as the JAX path's opens before its compiles
            output.start_time, output.compile_s = began, build_s
        return output

    def reuse_refusal(self, loaded: LoadedModel, spec: RunSpec) -> str | None:
        from playground.backends.torch.prefix_reuse import refusal

        return refusal(spec, loaded.model)

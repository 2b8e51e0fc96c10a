"""Every place the PyTorch path reaches into transformers' private API, and why: one module to check when
transformers changes (tests/unit/test_transformers_hooks.py fails with the hook's name when one breaks).

Each hook wraps a method on one model instance for one generate() call (the runner's generation lock is held),
so nothing is patched process-wide, except the attention-mask backends, which are wrapped once per process. Our
own decoding loops (contrastive search, diverse beam search, DoLa) call a few of generate's private helpers and
read two tensors it prepares; they do so through the functions here, never directly.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from transformers.generation.utils import GenerationMixin
from transformers.masking_utils import AttentionMaskInterface

from playground.backends.refusals import WINDOWED_ATTENTION

# the transformers version these hooks were written and checked against (requirements.txt pins it)
WRITTEN_FOR = "5.23.0"

# GenerationMixin methods wrapped per instance, with what we rely on each doing
LOGITS_PROCESSOR = "_get_logits_processor"  # builds the full processor list, sampling warpers included
CANDIDATE_GENERATOR = "_get_candidate_generator"  # builds assisted decoding's draft source
TOP_K_CONTINUATIONS = "_get_top_k_continuations"  # beam search: the 2K best (beam, token) pairs of a step
RUNNING_BEAMS = "_get_running_beams_for_next_iteration"  # beam search: the K of those that go on
# the candidate generator's methods assisted decoding calls once per verification step
GET_CANDIDATES = "get_candidates"
UPDATE_CANDIDATE_STRATEGY = "update_candidate_strategy"
# builds a forward's inputs from the whole sequence; assisted decoding's first verify pass calls it with
# next_sequence_length=None (every id), where `_prefill` would slice off what a restored cache already holds
PREPARE_INPUTS = "prepare_inputs_for_generation"

# generate(custom_generate=<callable>) runs the callable as its decoding loop with `_sample`'s arguments (a private
# signature). A keyword the callable takes that `_sample` does not is taken from generate()'s own keywords and
# handed on (`_extract_generation_mode_kwargs`); `_sample`'s streamer is not, so a loop of ours streams itself.
SAMPLE = "_sample"
CUSTOM_GENERATE = "custom_generate"

# what our own decoding loops (contrastive search, diverse beam search, DoLa: generate(custom_generate=...)) call of
# generate's private helpers and read of the config generate() prepared, to do what transformers' own loops do
UPDATE_MODEL_KWARGS = "_update_model_kwargs_for_generation"  # grows the mask, positions and cache after a forward
EXPAND_INPUTS = "_expand_inputs_for_generation"  # repeats every model kwarg's rows (k candidates, beams)
PREFILL = "_prefill"  # the prompt's forward, as _sample runs it (a restarted cache sliced, chunks if asked)
STATEFUL = "_is_stateful"  # a recurrent model, whose state cannot be cropped or reordered
PAD_TOKEN_TENSOR = "_pad_token_tensor"  # the pad id as a tensor, set by generate() on its config copy
EOS_TOKEN_TENSOR = "_eos_token_tensor"  # every EOS id as a tensor, set likewise
# CompileConfig's switch that lets generate() compile the forward on a CPU too (else on accelerators only); read by
# GenerationMixin._valid_auto_compile_criteria
COMPILE_ALL_DEVICES = "_compile_all_devices"

_INSTALL_LOCK = threading.Lock()


@contextmanager
def wrapped(obj: Any, name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    """obj.name replaced by wrap(original) on this instance only; the class's method is back afterwards."""
    setattr(obj, name, wrap(getattr(obj, name)))
    try:
        yield
    finally:
        delattr(obj, name)


def wrap_logits_processor(model: Any, wrap: Callable[[Any], Any]) -> Any:
    """The processor list generate() builds, passed through `wrap` (probes go around the whole list)."""
    return wrapped(model, LOGITS_PROCESSOR, wrap)


def wrap_candidate_generator(model: Any, wrap: Callable[[Any], Any]) -> Any:
    """The candidate generator assisted generate() builds, passed through `wrap` (to watch its drafts)."""
    return wrapped(model, CANDIDATE_GENERATOR, wrap)


@contextmanager
def first_pass_past_cache(model: Any) -> Iterator[None]:
    """Assisted decoding's first verify pass runs only the ids past what its cache already holds (a cache restored
    from the prefix store), as `_prefill` slices them for generate()'s other loops; later passes are untouched."""
    def wrap(prepare: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(prepare)  # generate() checks its kwargs against this signature (_validate_model_kwargs)
        def sliced(input_ids: torch.Tensor, *args: Any, next_sequence_length: int | None = None,
                   past_key_values: Any = None, is_first_iteration: bool | None = False, **kwargs: Any) -> Any:
            if is_first_iteration and next_sequence_length is None and past_key_values is not None:
                held = int(past_key_values.get_seq_length())
                next_sequence_length = input_ids.shape[1] - held if held else None
            return prepare(input_ids, *args, next_sequence_length=next_sequence_length,
                           past_key_values=past_key_values, is_first_iteration=is_first_iteration, **kwargs)
        return sliced

    with wrapped(model, PREPARE_INPUTS, wrap):
        yield


@contextmanager
def wrap_beam_steps(model: Any, top_k: Callable[[Any], Any], running: Callable[[Any], Any]) -> Iterator[None]:
    """Beam search's two per-step methods, each passed through its wrapper (to record the beam tree)."""
    with ExitStack() as stack:
        stack.enter_context(wrapped(model, TOP_K_CONTINUATIONS, top_k))
        stack.enter_context(wrapped(model, RUNNING_BEAMS, running))
        yield


def own_loop(loop: Callable[..., Any], **ours: Any) -> dict[str, Any]:
    """generate()'s keywords that run `loop` as its decoding loop and hand it `ours` (what it records into, where
    it streams). A name `_sample` takes would not be handed on, so one is refused here, by name."""
    taken = sorted(set(ours) & set(inspect.signature(getattr(GenerationMixin, SAMPLE)).parameters))
    if taken:
        raise TypeError(f"generate() keeps {taken} for {SAMPLE}'s own arguments: name the loop's keywords otherwise")
    return {CUSTOM_GENERATE: loop, **ours}


def update_model_kwargs(model: Any, outputs: Any, model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The model kwargs after a forward that wrote `outputs` (its cache, one more position)."""
    return getattr(model, UPDATE_MODEL_KWARGS)(outputs, model_kwargs)


def expand_inputs(model: Any, expand_size: int, input_ids: torch.Tensor,
                  model_kwargs: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    """The ids and model kwargs with every row repeated `expand_size` times."""
    return getattr(model, EXPAND_INPUTS)(expand_size=expand_size, input_ids=input_ids, **model_kwargs)


def prefill(model: Any, input_ids: torch.Tensor, generation_config: Any, model_kwargs: dict[str, Any]) -> Any:
    """The prompt's forward as generate's own loops run it; its outputs (logits, cache, hidden states if asked)."""
    return getattr(model, PREFILL)(input_ids, generation_config, model_kwargs)


def is_stateful(model: Any) -> bool:
    return bool(getattr(model, STATEFUL, False))


def compiled_on_every_device(compile_config: Any) -> Any:
    """The compile config, made to compile on any device (a CPU included)."""
    setattr(compile_config, COMPILE_ALL_DEVICES, True)
    return compile_config


def pad_token(generation_config: Any) -> torch.Tensor | None:
    """The pad id generate() prepared (None: no pad token)."""
    return getattr(generation_config, PAD_TOKEN_TENSOR, None)


def eos_tokens(generation_config: Any) -> torch.Tensor | None:
    """Every EOS id generate() prepared (None: none)."""
    return getattr(generation_config, EOS_TOKEN_TENSOR, None)


@contextmanager
def with_attention_mask(model: Any, cache: Any, mask_for: Callable[[int], Any]) -> Iterator[None]:
    """Each forward over `cache` of a chunk for which mask_for(length) gives a (1, 1, q, keys) bool mask gets
    it as its attention mask, additive in the model's dtype: transformers passes a 4D mask to attention as it
    is. Forwards over another cache (a draft that is this same model, with its own cache) are left alone."""
    def wrap(forward: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(forward)  # keeps forward's signature, which generate() checks its kwargs against
        def masked(*args: Any, **kwargs: Any) -> Any:
            ids = kwargs.get("input_ids")
            if ids is None or kwargs.get("past_key_values") is not cache:
                return forward(*args, **kwargs)
            mask = mask_for(ids.shape[1])
            if mask is not None:
                low = torch.finfo(model.dtype).min
                kwargs["attention_mask"] = torch.zeros(mask.shape, dtype=model.dtype, device=ids.device).masked_fill(
                    ~mask.to(ids.device), low)
            return forward(*args, **kwargs)
        return masked

    with wrapped(model, "forward", wrap):
        yield


def install_mask_wrapper(wrap: Callable[[Any], Any], marker: str) -> None:
    """Each windowed attention-mask backend replaced by wrap(backend), once per process: a backend already
    carrying `marker` is left alone (idempotent, safe from several threads)."""
    with _INSTALL_LOCK:
        registry = AttentionMaskInterface()
        for name in WINDOWED_ATTENTION:
            current = registry[name]
            if not getattr(current, marker, False):
                AttentionMaskInterface.register(name, wrap(current))


def mask_wrapper_installed(marker: str) -> bool:
    """Whether every windowed backend still carries `marker` (something may have registered over it since)."""
    registry = AttentionMaskInterface()
    return all(getattr(registry[name], marker, False) for name in WINDOWED_ATTENTION)

"""What a model's config refuses, in the same words on both backends: a cache type it cannot have, a strategy it
cannot run. The registry's entries name their checks here (`check_model`), and both backends call `check_cache`
from the config alone, before any weights load; nothing here imports either backend.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from transformers.cache_utils import get_layer_types_and_kwargs

from playground import registry
from playground.backends.dola_layers import candidate_layers, requested
from playground.errors import PlaygroundError
from playground.spec import RunSpec

# attention-mask backends that take a mask function, so that an imposed sliding window can be added to it
# (backends/torch/transformers_hooks.py wraps them); an imposed window is refused on a model using any other
WINDOWED_ATTENTION = ("sdpa", "eager")
# Models whose attention applies one global RoPE with HF's rotate-half layout before `cache.update`.
SINK_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
# RoPE types whose inverse frequencies do not depend on the sequence length, so rotations compose exactly.
STATIC_ROPE_TYPES = ("default", "linear", "llama3")


def check_cache(spec: RunSpec, config: Any) -> None:
    """Refuse, from the model's config alone (so before its weights load), a cache this model cannot have, or a
    strategy it cannot run; both backends refuse with these words."""
    checks = [registry.cache_type(spec.cache).check_model, registry.strategy(spec.strategy).check_model]
    text_config = config.get_text_config(decoder=True)
    layer_types, _ = get_layer_types_and_kwargs(text_config)
    for check_model in checks:
        if check_model is None:
            continue
        try:
            check_model(spec, text_config, layer_types)
        except ValueError as exc:
            raise PlaygroundError(str(exc)) from None


def check_imposable(config: Any, layer_types: list[str]) -> None:
    """An imposed window needs plain attention layers and a mask built from a mask function."""
    model_type = getattr(config, "model_type", "?")
    if set(layer_types) != {"full_attention"}:
        raise ValueError(f"cannot impose a sliding window on model_type={model_type!r}: its layers are "
                         f"{sorted(set(layer_types))}, not plain attention; use cache 'dynamic'")
    attention = getattr(config, "_attn_implementation", None) or "sdpa"
    if attention not in WINDOWED_ATTENTION:
        raise ValueError(f"an imposed sliding window needs attn_implementation in {WINDOWED_ATTENTION} "
                         f"(model_type={model_type!r} uses {attention!r}); load the model with sdpa or eager")


def check_sliding(spec: RunSpec, config: Any, layer_types: list[str]) -> None:
    """The sliding cache's model check: a model with its own sliding layers keeps its window; on any other the
    window is imposed, which needs plain attention layers (both backends)."""
    if "sliding_attention" not in layer_types:
        check_imposable(config, layer_types)


def check_sink_rope(config: Any) -> None:
    """Raise a ValueError naming the model type and what to use instead when sink re-rotation cannot be exact."""
    model_type = getattr(config, "model_type", "?")
    alternative = "use cache 'sliding' (make_sliding_cache) or 'dynamic' for this model"
    layer_types, _ = get_layer_types_and_kwargs(config)
    if set(layer_types) != {"full_attention"}:
        raise ValueError(f"SinkCache does not support model_type={model_type!r}: it has native sliding-window "
                         f"(or non-full-attention) layers {sorted(set(layer_types))}; {alternative}")
    rope = getattr(config, "rope_parameters", None) or {}
    if any(isinstance(v, dict) for v in rope.values()):
        raise ValueError(f"SinkCache does not support model_type={model_type!r}: it uses a different RoPE per "
                         f"layer type ({sorted(rope)}); {alternative}")
    if model_type not in SINK_MODEL_TYPES:
        raise ValueError(f"SinkCache re-rotates keys with Llama-style RoPE and supports model types "
                         f"{SINK_MODEL_TYPES}, not model_type={model_type!r}; {alternative}")
    rope_type = rope.get("rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        raise ValueError(f"SinkCache needs RoPE frequencies that do not change with length ({STATIC_ROPE_TYPES}); "
                         f"model_type={model_type!r} uses rope_type={rope_type!r}; {alternative}")
    partial = rope.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None))
    if partial not in (None, 1.0):
        raise ValueError(f"SinkCache does not support partial rotary embeddings (model_type={model_type!r}, "
                         f"partial_rotary_factor={partial}); {alternative}")


def check_sink(spec: RunSpec, config: Any, layer_types: list[str]) -> None:
    """The sink cache's model check (both backends re-rotate the sinks' keys the same way)."""
    check_sink_rope(config)


def check_contrastive(spec: RunSpec, config: Any, layer_types: list[str]) -> None:
    """Contrastive search's model check: a model's own sliding-window layers cannot give back the position its loop
    crops at the end once past their window (transformers 4.52 refused contrastive search on such a cache too)."""
    windowed = sorted({kind for kind in layer_types if kind != "full_attention"})
    if windowed:
        raise ValueError(f"contrastive search cannot run on model_type={config.model_type!r}: its layers of kind "
                         f"{', '.join(repr(k) for k in windowed)} keep a window and cannot drop the position the "
                         "search crops from the cache after its last step; use a model with full attention only")


def check_dola(spec: RunSpec, config: Any, layer_types: list[str]) -> None:
    """DoLa's model check: the layers `spec.dola_layers` names must exist in this model."""
    candidate_layers(SimpleNamespace(config=config), requested(spec.dola_layers))

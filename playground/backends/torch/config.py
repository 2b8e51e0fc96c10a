"""Strategy -> transformers GenerationConfig: how generate() decodes; the logits chain comes from chain.py."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from transformers import CompileConfig, GenerationConfig

from playground import registry
from playground.backends.base import first_eos, same_vocabulary
from playground.backends.torch.strategy import plug_in
from playground.backends.torch.transformers_hooks import compiled_on_every_device
from playground.spec import RunSpec

if TYPE_CHECKING:
    from playground.backends.torch.strategy import TorchStrategy
    from playground.models.loaded import LoadedModel


def generation_config(spec: RunSpec, model: Any, plugin: TorchStrategy | None = None) -> GenerationConfig:
    """A GenerationConfig for `spec`, starting from the model's own (it carries eos/pad ids), with what the
    strategy's plug-in (`plugin`, else a new one) sets."""
    config = copy.deepcopy(model.generation_config)
    # unset every knob first: the model's defaults (e.g. a shipped temperature) must not leak into a run. The
    # logits chain is ours (chain.py appends it in its own order), so the config asks transformers for none of
    # it; a sampling run's top_k=0 must be said, since transformers fills an unset (None) top_k with its default of 50
    config.update(do_sample=False, num_beams=1, temperature=None, top_k=None, top_p=None, min_p=None, typical_p=None,
                  epsilon_cutoff=None, eta_cutoff=None, repetition_penalty=None, no_repeat_ngram_size=None,
                  min_new_tokens=None, num_return_sequences=1, length_penalty=None, early_stopping=None)
    config.return_dict_in_generate = True  # we read scores and sequences from the output object
    # eager is eager on every device: on an accelerator generate() compiles the forward by itself whenever the cache
    # is static, which would make a "PyTorch, static" column a compiled one without saying so
    config.disable_compile = True
    if spec.torch_compile != "off":
        config.compile_config, config.disable_compile = compile_config(spec.torch_compile), False
    config.max_new_tokens = spec.max_new_tokens
    config.max_length = None
    if config.pad_token_id is None:
        config.pad_token_id = first_eos(config)
    if registry.strategy(spec.strategy).samples(spec.assisted_sampling):
        config.update(do_sample=True, top_k=0)
    plugin = plugin or plug_in(spec)
    plugin.configure(config)
    config.validate(strict=True)
    plugin.loop_settings(config)
    return config


def compile_config(mode: str) -> CompileConfig:
    """torch.compile of the decode step in `mode`: shapes static until dynamo sees one change (dynamic=None, its
    default and transformers': a sliding layer of the static cache counts its length in a Python int, which a
    static compile would take as a constant and compile again at every step), the whole forward one graph
    (fullgraph: a graph break is an error, never a step run half eager), and on every device (transformers
    compiles on accelerators only unless told). Configs of one mode compare equal, so the model keeps its
    compiled call from request to request."""
    return compiled_on_every_device(CompileConfig(fullgraph=True, dynamic=None, mode=mode))


def beam_search(spec: RunSpec, config: GenerationConfig) -> None:
    config.update(num_beams=spec.num_beams, length_penalty=spec.length_penalty,
                  early_stopping=spec.early_stopping, num_return_sequences=spec.num_return_sequences,
                  output_scores=True)


def diverse_beam(spec: RunSpec, config: GenerationConfig) -> None:
    """Beam search's settings, and the groups and their penalty, which the loop (diverse_beam.py) reads."""
    beam_search(spec, config)
    config.num_beam_groups, config.diversity_penalty = spec.num_beam_groups, spec.diversity_penalty


def contrastive(spec: RunSpec, config: GenerationConfig) -> None:
    """generate() leaves these in the config for the loop (contrastive.py) to read; it sets nothing else. Set as
    attributes: update() validates, and would warn that top_k "may be ignored" without sampling."""
    config.penalty_alpha, config.top_k = spec.penalty_alpha, spec.top_k


def dola(spec: RunSpec, config: GenerationConfig) -> None:
    """The loop (dola.py) reads dola_layers from the config: 'low', 'high' or a list of layer indices."""
    value = spec.dola_layers.strip()
    config.dola_layers = value if value in ("low", "high") else [int(i) for i in value.split(",")]


def assisted(spec: RunSpec, config: GenerationConfig) -> None:
    """Prompt lookup is a GenerationConfig setting; a draft model is a generate() argument (assistant_kwargs)."""
    if spec.prompt_lookup:
        config.prompt_lookup_num_tokens = spec.prompt_lookup


def assistant_kwargs(spec: RunSpec, main_tokenizer: Any, draft: LoadedModel | None) -> dict[str, Any]:
    """generate() kwargs for the draft model (loaded by the runner): plain speculative decoding when the draft
    shares the main model's vocabulary, universal assisted decoding (text re-tokenized between the two) when
    it does not."""
    if spec.assistant is None:  # RunSpec allows an assistant only for a strategy that drafts
        return {}
    if draft is None:
        raise ValueError("assisted decoding with an assistant model needs the loaded draft model")
    kwargs: dict[str, Any] = {"assistant_model": draft.model}
    if not same_vocabulary(main_tokenizer, draft.tokenizer):
        kwargs.update(tokenizer=main_tokenizer, assistant_tokenizer=draft.tokenizer)
    return kwargs


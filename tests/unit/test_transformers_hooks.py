"""Contracts of the hooks into transformers' private API (playground/backends/torch/transformers_hooks.py): each
private method exists, takes what we pass or read, and is really called by the generate() mode that needs it.
When transformers changes one, the failure names the hook and where to update it."""

from __future__ import annotations

import inspect

import pytest
import torch
import transformers
from transformers import masking_utils
from transformers.masking_utils import AttentionMaskInterface

from playground.backends.torch import transformers_hooks as hooks
from tests.helpers import tiny_llama

UPDATE = f"update playground/backends/torch/transformers_hooks.py (written for transformers {hooks.WRITTEN_FOR})"


def broke(hook: str, what: str) -> str:
    return f"transformers {transformers.__version__}: {hook} {what}; {UPDATE}"


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


def generate(model, **kwargs) -> None:
    ids = torch.tensor([[5, 6, 7, 5, 6, 7, 5, 6]])
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, pad_token_id=256, **kwargs)


def calls_of(model, name: str, run) -> list[tuple[tuple, dict, object]]:
    """Each call of model.name during run(): its arguments and what it returned."""
    if not callable(getattr(model, name, None)):
        pytest.fail(broke(name, "is gone from GenerationMixin"))
    seen: list[tuple[tuple, dict, object]] = []

    def wrap(original):
        def call(*args, **kwargs):
            out = original(*args, **kwargs)
            seen.append((args, kwargs, out))
            return out
        return call

    with hooks.wrapped(model, name, wrap):
        run()
    return seen


def test_the_logits_processor_list_is_built_once_per_generate(model):
    seen = calls_of(model, hooks.LOGITS_PROCESSOR, lambda: generate(model, do_sample=True, top_k=5))
    assert len(seen) == 1, broke(hooks.LOGITS_PROCESSOR, f"was called {len(seen)} times in one generate()")
    processors = seen[0][2]
    assert isinstance(processors, transformers.LogitsProcessorList), broke(
        hooks.LOGITS_PROCESSOR, f"returned {type(processors).__name__}, not a LogitsProcessorList")
    assert any(isinstance(p, transformers.TopKLogitsWarper) for p in processors), broke(
        hooks.LOGITS_PROCESSOR, "no longer puts the sampling warpers in the list it builds")


def test_assisted_generate_builds_a_candidate_generator_we_can_watch(model):
    seen = calls_of(model, hooks.CANDIDATE_GENERATOR, lambda: generate(model, prompt_lookup_num_tokens=3))
    assert len(seen) == 1, broke(hooks.CANDIDATE_GENERATOR, "was not called by assisted generate()")
    generator = seen[0][2]
    for method in (hooks.GET_CANDIDATES, hooks.UPDATE_CANDIDATE_STRATEGY):
        assert callable(getattr(generator, method, None)), broke(
            hooks.CANDIDATE_GENERATOR, f"returns a {type(generator).__name__} without {method}()")


def test_assisted_generates_first_verify_pass_reads_every_id_so_a_warm_run_slices_it(model):
    """first_pass_past_cache relies on the first pass asking for every id (no next_sequence_length) and the later
    ones for their own; it then runs only what a restored cache lacks."""
    seen = calls_of(model, hooks.PREPARE_INPUTS, lambda: generate(model, prompt_lookup_num_tokens=3))
    first = [kwargs for _, kwargs, _ in seen if kwargs.get("is_first_iteration")]
    assert len(first) == 1 and first[0].get("next_sequence_length") is None, broke(
        hooks.PREPARE_INPUTS, "is no longer called once with every id for assisted decoding's first verify pass")
    cache = transformers.DynamicCache(config=model.config)
    ids = torch.tensor([[5, 6, 7, 5, 6, 7, 5, 6]])
    with torch.inference_mode():
        model(ids[:, :5], past_key_values=cache)
        with hooks.first_pass_past_cache(model):
            inputs = model.prepare_inputs_for_generation(ids, past_key_values=cache, is_first_iteration=True)
    assert inputs["input_ids"].tolist() == [[7, 5, 6]]


def test_prompt_lookup_under_both_wrappers_still_takes_generates_attention_mask(model):
    """generate() checks its kwargs against the signatures of prepare_inputs_for_generation and forward: a warm
    prompt lookup over a cache with its own mask (the sink cache) wraps both, and a bare (*args, **kwargs) wrapper
    made generate() refuse attention_mask."""
    cache = transformers.DynamicCache(config=model.config)
    with hooks.first_pass_past_cache(model), hooks.with_attention_mask(model, cache, lambda _: None):
        generate(model, prompt_lookup_num_tokens=3, past_key_values=cache)


def test_beam_search_steps_take_the_arguments_the_beam_tree_reads(model):
    run = lambda: generate(model, num_beams=3, num_return_sequences=2)  # noqa: E731
    top_k = calls_of(model, hooks.TOP_K_CONTINUATIONS, run)
    assert top_k, broke(hooks.TOP_K_CONTINUATIONS, "was not called by beam search")
    args, kwargs, out = top_k[0]
    assert {"cur_len", "decoder_prompt_len"} <= set(kwargs), broke(
        hooks.TOP_K_CONTINUATIONS, f"is called with {sorted(kwargs)}, without cur_len / decoder_prompt_len")
    assert isinstance(out, tuple) and len(out) == 3, broke(
        hooks.TOP_K_CONTINUATIONS, "no longer returns (scores, sequences, beam indices)")
    running = calls_of(model, hooks.RUNNING_BEAMS, run)
    assert running, broke(hooks.RUNNING_BEAMS, "was not called by beam search")
    wanted = {"topk_log_probs", "next_token_hits_stopping_criteria", "num_beams"}
    assert wanted <= set(running[0][1]), broke(hooks.RUNNING_BEAMS, f"is called with {sorted(running[0][1])}")


@pytest.mark.parametrize("name", hooks.WINDOWED_ATTENTION)
def test_windowed_mask_backends_take_an_offset_a_mask_function_and_a_local_size(name):
    """transformers' own backends (the registry may hold our wrapper by now): the window rides on kv_offset and
    mask_function, and sdpa must be told the local size so it does not skip the mask."""
    backend = {"sdpa": masking_utils.sdpa_mask, "eager": masking_utils.eager_mask}[name]
    assert name in AttentionMaskInterface(), broke("AttentionMaskInterface", f"has no {name!r} backend")
    parameters = inspect.signature(backend).parameters
    wanted = ("kv_offset", "mask_function", "local_size") if name == "sdpa" else ("kv_offset", "mask_function")
    for parameter in wanted:
        assert parameter in parameters, broke(f"masking_utils.{backend.__name__}", f"no longer takes {parameter}")


def test_a_custom_generate_loop_gets_the_config_and_helpers_our_own_loops_use(model):
    """Contrastive search, diverse beam search and DoLa run as generate(custom_generate=...) loops that read the
    pad and EOS tensors generate() prepared and call its prefill and model-kwargs helpers."""
    for name, params in ((hooks.UPDATE_MODEL_KWARGS, ("outputs", "model_kwargs")),
                         (hooks.EXPAND_INPUTS, ("expand_size", "input_ids")),
                         (hooks.PREFILL, ("input_ids", "generation_config", "model_kwargs"))):
        method = getattr(model, name, None)
        assert callable(method), broke(name, "is gone from GenerationMixin")
        missing = set(params) - set(inspect.signature(method).parameters)
        assert not missing, broke(name, f"no longer takes {sorted(missing)}")
    assert hooks.is_stateful(model) is False and hasattr(model, hooks.STATEFUL), broke(hooks.STATEFUL, "is gone")
    seen = {}

    def loop(model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
             **model_kwargs):
        seen["pad"], seen["eos"] = hooks.pad_token(generation_config), hooks.eos_tokens(generation_config)
        outputs = hooks.prefill(model, input_ids, generation_config, model_kwargs)
        grown = hooks.update_model_kwargs(model, outputs, model_kwargs)
        seen["cache"] = grown["past_key_values"].get_seq_length()
        expanded, _ = hooks.expand_inputs(model, 3, input_ids, {})
        seen["rows"] = expanded.shape[0]
        return input_ids

    generate(model, custom_generate=loop)
    assert seen["pad"] is not None and int(seen["pad"]) == 256, broke(hooks.PAD_TOKEN_TENSOR, "is not set")
    assert seen["eos"] is not None and 256 in seen["eos"].view(-1).tolist(), broke(hooks.EOS_TOKEN_TENSOR, "is not set")
    assert seen["cache"] == 8, broke(hooks.PREFILL, f"left {seen['cache']} cached positions for an 8-token prompt")
    assert seen["rows"] == 3, broke(hooks.EXPAND_INPUTS, "did not repeat the rows")


def test_a_custom_generate_loop_gets_its_own_keywords_and_not_the_streamer(model):
    """A loop of ours (playground/backends/torch/strategy.py's OwnLoop) takes what it records into and where it
    streams as keywords of its own, which generate() must hand on; generate() puts the prompt in the streamer and
    hands the loop none, so the loop streams through its own keyword; what the loop returns, generate returns."""
    sample = inspect.signature(getattr(transformers.GenerationMixin, hooks.SAMPLE)).parameters
    for name in ("logits_processor", "stopping_criteria", "generation_config"):
        assert name in sample, broke(hooks.SAMPLE, f"no longer takes {name}, which our loops are called with")
    seen = {}

    def loop(model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False, *,
             record=None, emit=None, **model_kwargs):
        seen.update(record=record, emit=emit, other=set(model_kwargs), processors=logits_processor)
        return input_ids[:, :3]

    class Prompts:
        def __init__(self):
            self.puts = []

        def put(self, value):
            self.puts.append(value.reshape(-1).tolist())

        def end(self):
            pass

    record, streamer = [], Prompts()
    ids = torch.tensor([[5, 6, 7, 5]])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, pad_token_id=256,
                             streamer=streamer, **hooks.own_loop(loop, record=record, emit=print))
    assert seen["record"] is record and seen["emit"] is print, broke(
        hooks.CUSTOM_GENERATE, "no longer hands a callable the keywords its signature adds to _sample's")
    assert "streamer" not in seen["other"], broke(hooks.CUSTOM_GENERATE, "now hands the loop the streamer")
    assert streamer.puts == [[5, 6, 7, 5]], broke(hooks.CUSTOM_GENERATE, "no longer puts the prompt, and only it")
    assert isinstance(seen["processors"], transformers.LogitsProcessorList)
    assert out.tolist() == [[5, 6, 7]], broke(hooks.CUSTOM_GENERATE, "no longer returns the loop's result")
    with pytest.raises(TypeError, match=r"\['streamer'\]"):
        hooks.own_loop(loop, streamer=streamer)  # a name _sample takes would never reach the loop


def test_a_compile_config_made_for_every_device_lets_generate_compile_on_a_cpu(model):
    import copy

    from transformers import CompileConfig, StaticCache

    config = copy.deepcopy(model.generation_config)
    config.compile_config, config.disable_compile = hooks.compiled_on_every_device(CompileConfig()), False
    cache = {"past_key_values": StaticCache(config=model.config, max_cache_len=16)}
    assert model.device.type == "cpu" and model._valid_auto_compile_criteria(cache, config), broke(
        hooks.COMPILE_ALL_DEVICES, "no longer lets generate() compile the forward on a CPU")

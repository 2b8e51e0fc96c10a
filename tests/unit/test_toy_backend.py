"""A backend is data: the proof, from this file alone (nothing under playground/ edited).

"toy" is a third backend: the loaded PyTorch model called one token at a time in a plain Python loop over a
transformers DynamicCache, taking the most likely token. It registers once (`BackendType`) and adds its side to
the three entries it runs (greedy decoding, the dynamic cache, and min_new_tokens, the one stage of the logits
chain in every chain) under its own name in their `impl` mappings; no other entry names it, so the registry's
rules refuse every other strategy, cache and active stage on it, in RunSpec's one line. Registered, it is one of
the CLI's `--backend` choices and the page's backend selector, and its greedy tokens are the PyTorch path's; the
registry is as before once each test ends.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest

from playground import compatibility, registry, runner
from playground.backends.base import GenerationOutput, Held, MemoryNeed
from playground.errors import PlaygroundError
from playground.registry import BackendType
from playground.spec import RunSpec
from tests.helpers import allowed_tiny_model

NAME = "toy"
PROMPT = "a backend is a registration"


def _min_new_tokens(spec: RunSpec, stops: tuple[int, ...]) -> Any:
    """The stage's toy side: (logits (V,), tokens so far) -> the logits with the stop ids banned until enough."""

    def apply(logits: Any, produced: int) -> Any:
        if produced < spec.min_new_tokens:
            logits[list(stops)] = -float("inf")
        return logits

    return apply


def _greedy(spec: RunSpec) -> Any:
    """Greedy decoding's toy side: argmax of each step's logits after the chain's toy sides, a forward per token
    through the cache."""

    def decode(model: Any, prompt_ids: list[int], cache: Any, emit: Any, should_stop: Any) -> GenerationOutput:
        import torch

        from playground.backends.base import eos_ids
        from playground.registry import chain

        stops, began = eos_ids(model.generation_config), time.perf_counter()
        stages = [stage.impl[NAME](spec, stops) for stage in chain.stages(spec)]  # RunSpec refused any without
        ids, new, times = torch.tensor([prompt_ids]), [], []  # ids: (1, T) the prompt, then (1, 1) per step
        with torch.no_grad():
            while len(new) < spec.max_new_tokens and not should_stop():
                logits = model(input_ids=ids, past_key_values=cache, use_cache=True).logits  # (1, T, V)
                scores = logits[0, -1]  # (V,)
                for stage in stages:
                    scores = stage(scores, len(new))
                token = int(scores.argmax())
                new.append(token)
                times.append(time.perf_counter())
                emit([token])
                if token in stops:
                    break
                ids = torch.tensor([[token]])
        held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
                   if t is not None)
        return GenerationOutput(sequences=[new], start_time=began, token_times=times, kv_cache_bytes=held)

    return decode


def _dynamic(spec: RunSpec) -> Any:
    from transformers import DynamicCache

    return DynamicCache()


class ToyBackend:
    """The runner's side of the toy: runs what the entries name under "toy", nothing of its own."""

    name = NAME

    def source_weights(self, spec: RunSpec) -> str:
        return spec.weights

    def preflight(self, spec: RunSpec, config: Any, draft_config: Any) -> None:
        return None

    def memory_needed(self, loaded: Any, spec: RunSpec, prompt_tokens: int, draft: Any) -> MemoryNeed:
        return MemoryNeed(Held("the toy's cache", 0))

    def logprobs_along(self, loaded: Any, spec: RunSpec, prompt_ids: list[int], new_ids: list[int]) -> Any:
        raise PlaygroundError("the toy backend measures no quality")

    def logprobs_through_cache(self, loaded: Any, spec: RunSpec, text_ids: list[int], chunk: int,
                               progress: Any = None) -> Iterator[Any]:
        raise PlaygroundError("the toy backend measures no quality")

    def generate(self, loaded: Any, prompt_ids: list[int], spec: RunSpec, emit: Any, should_stop: Any,
                 draft: Any = None, progress: Any = None, preview: Any = None) -> GenerationOutput:
        decode = registry.strategy(spec.strategy).impl[NAME](spec)
        cache = registry.cache_type(spec.cache).impl[NAME](spec)
        return decode(loaded.model, prompt_ids, cache, emit, should_stop)


TOY = BackendType(name=NAME, label="toy", make=ToyBackend)


def toy_registered() -> Any:
    """The toy backend and its two sides, added to the built-in entries as a new backend's file would add them."""
    sides = ((registry.strategy("greedy"), _greedy), (registry.cache_type("dynamic"), _dynamic),
             (registry.processor("min_new_tokens"), _min_new_tokens))
    return registry.registered(TOY, *(dataclasses.replace(entry, impl={**entry.impl, NAME: side})
                                      for entry, side in sides))


def test_the_toy_backend_runs_greedy_and_the_registry_refuses_the_rest():
    with toy_registered():
        assert registry.backend_names() == ("torch", "jax", NAME)
        runs = {(row["strategy"], cache) for row in compatibility.table() if row["backend"] == NAME
                for cache in registry.cache_names() if row[cache] == "yes"}
        assert runs == {("greedy", "dynamic")}
        assert RunSpec(backend=NAME, cache="dynamic").backend == NAME
        with pytest.raises(PlaygroundError, match="sampling has no plug-in on the toy path; backend 'torch' or "
                                                  "'jax' runs it"):
            RunSpec(backend=NAME, strategy="sampling", cache="dynamic")
        with pytest.raises(PlaygroundError, match="the static cache has no side on the toy path; use cache "
                                                  "'dynamic'; backend 'torch' or 'jax' builds it"):
            RunSpec(backend=NAME, cache="static")
        with pytest.raises(PlaygroundError, match="backend=toy cannot run the logits chain's stage "
                                                  "'repetition_penalty': it has no toy side yet"):
            RunSpec(backend=NAME, cache="dynamic", repetition_penalty=1.3)
        with pytest.raises(PlaygroundError, match="the toy path runs on one device"):
            RunSpec(backend=NAME, cache="dynamic", devices=2)
    assert registry.backend_names() == ("torch", "jax")
    assert registry.strategy("greedy").plugin(NAME) is None and registry.cache_type("dynamic").plugin(NAME) is None
    with pytest.raises(PlaygroundError, match="backend 'toy' is not one of: torch, jax"):
        RunSpec(backend=NAME)


def test_the_toy_backend_is_a_choice_of_the_cli_and_of_the_page(capsys):
    from playground.__main__ import build_parser
    from playground.ui.wiring import build_ui

    def parsed(backend: str) -> str:
        return build_parser().parse_args(["run", "--prompt", PROMPT, "--backend", backend]).backend

    with toy_registered():
        assert parsed(NAME) == NAME
        with pytest.raises(SystemExit):
            build_parser().parse_args(["run", "--help"])
        assert "{torch,jax,toy}" in capsys.readouterr().out
        _, page = build_ui()
        assert [value for _, value in page.columns[0].knobs["backend"].choices] == ["torch", "jax", NAME]
    with pytest.raises(SystemExit):  # argparse: invalid choice
        parsed(NAME)


def test_the_toy_backends_greedy_tokens_are_the_pytorch_paths(tmp_path, monkeypatch):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as model, toy_registered():
        toy = runner.run_to_result(PROMPT, RunSpec(model=model, backend=NAME, cache="dynamic", max_new_tokens=10))
        torch = runner.run_to_result(PROMPT, RunSpec(model=model, backend="torch", max_new_tokens=10))
    assert toy["spec"]["backend"] == NAME and toy["new_tokens"] == 10
    assert toy["token_ids"] == torch["token_ids"] and toy["text"] == torch["text"]
    assert toy["metrics"]["kv_cache_bytes"] > 0



def test_the_toy_side_of_min_new_tokens_bans_the_stop_ids_until_enough_tokens():
    import torch

    with toy_registered():
        spec = RunSpec(backend=NAME, cache="dynamic", min_new_tokens=2)
    stage = _min_new_tokens(spec, (3,))
    assert stage(torch.zeros(5), 1)[3] == -float("inf") and stage(torch.zeros(5), 2)[3] == 0.0

"""The PyTorch path's strategy plug-ins (playground/backends/torch/strategy.py): every registered strategy's plug-in
keeps the protocol, and what the view gets from a run is what its plug-in says it records: streamed tokens where it
streams, one distribution per token where it probes, the beam tree of a beam-type search, the verification steps
of assisted decoding, and what an own loop weighed per token."""

import dataclasses

import pytest
import torch

from playground import registry
from playground.backends.torch.strategy import Generate, OwnLoop, TorchStrategy, plug_in
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from tests.helpers import torch_run

PROMPT = torch.tensor([[5, 17, 42, 99, 5, 17, 42, 99, 5, 17]])  # repeats: prompt lookup finds drafts
SPECS = {
    "assisted": {"prompt_lookup": 3},
    "beam": {"num_beams": 3, "num_return_sequences": 2},
    "beam_sample": {"num_beams": 3, "num_return_sequences": 2, "seed": 4},
    "diverse_beam": {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1.0, "num_return_sequences": 2},
    "contrastive": {"penalty_alpha": 0.6, "top_k": 4},
    "dola": {"dola_layers": "low"},
}
# what a token's record gains from an own loop, per strategy
OWN_RECORD = {"contrastive": "candidates", "dola": "dola"}


def spec_for(name: str) -> RunSpec:
    return RunSpec(strategy=name, max_new_tokens=8, **SPECS.get(name, {}))


@pytest.mark.parametrize("name", registry.strategy_names())
def test_every_strategys_plugin_keeps_the_protocol_and_is_new_per_request(name):
    first, second = plug_in(spec_for(name)), plug_in(spec_for(name))
    assert isinstance(first, TorchStrategy)
    assert first is not second  # what one request records never reaches another's
    if registry.strategy(name).rows_knob is not None:
        assert not first.streams and not first.probes  # several hypotheses: nothing final, no one distribution


@pytest.mark.parametrize("name", registry.strategy_names())
def test_a_run_carries_what_its_plugin_records(tiny, name):
    plugin = plug_in(spec_for(name))
    out, emitted = torch_run(tiny, PROMPT, spec_for(name))
    first = out.sequences[0]
    assert emitted == first  # streamed as chosen, or the best sequence once at the end
    if plugin.streams:
        assert len(out.token_times) == len(first)
    else:
        assert out.token_times == []
    if plugin.probes:
        assert out.token_info is not None and len(out.token_info) == len(first)
        assert all(0.0 <= info["p"] <= 1.0 for info in out.token_info)
    else:
        assert out.token_info is None
    if registry.strategy(name).rows_knob is not None:
        assert out.beam_tree and len(out.sequences) == 2 and out.scores is not None
        assert sum(node["chosen"] for step in out.beam_tree for node in step) == len(first)
    else:
        assert out.beam_tree is None and len(out.sequences) == 1
    if registry.strategy(name).drafts:
        steps = out.assisted_steps
        assert steps and out.forward_passes == len(steps) and out.draft_flags is not None
        assert sum(out.draft_flags) == sum(step["accepted"] for step in steps)
    else:
        assert out.assisted_steps is None and out.draft_flags is None
    if name in OWN_RECORD:
        assert isinstance(plugin, OwnLoop)
        assert all(OWN_RECORD[name] in info for info in out.token_info or [])


def test_an_entry_naming_generate_runs_transformers_own_loop_and_one_naming_nothing_is_refused(tiny):
    """A strategy whose torch plug-in is `Generate` is generate()'s one-token-per-step loop: greedy's tokens. One
    with no plug-in for a backend is refused there, in RunSpec's one line, before anything runs."""
    plain = registry.Strategy(name="plain-toy", label="plain toy", help="greedy, on transformers' own loop",
                              impl={"torch": Generate})
    with registry.registered(plain):
        assert type(plug_in(RunSpec(strategy="plain-toy"))) is Generate
        toy, _ = torch_run(tiny, PROMPT, RunSpec(strategy="plain-toy", max_new_tokens=8))
        with pytest.raises(PlaygroundError, match="plain toy has no plug-in on the JAX path; backend 'torch' runs it"):
            RunSpec(strategy="plain-toy", backend="jax")
    greedy, _ = torch_run(tiny, PROMPT, RunSpec(max_new_tokens=8))
    assert toy.sequences == greedy.sequences
    with registry.registered(dataclasses.replace(plain, impl={})):
        with pytest.raises(PlaygroundError, match="plain toy has no plug-in on the PyTorch path; no backend runs it"):
            RunSpec(strategy="plain-toy")

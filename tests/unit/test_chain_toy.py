"""The logits chain's worked proof: a stage and its knob registered from this file alone (nothing under
playground/ edited) run on both backends, and show up as a column knob, a CLI flag, a sweep knob and in the
sampling cut.

The toy stage, "toy_ban", bans one token id (the knob `toy_banned_id`; -1 bans nothing). It is a processor, so it
acts on greedy decoding too: banning greedy's first token must make both backends pick the runner-up, and the
stage must report that it removed one token at every step. The id is a traced argument on JAX, so banning
another id compiles nothing.
"""

from __future__ import annotations

import dataclasses

import pytest

from playground import registry, runner
from playground.errors import PlaygroundError
from playground.registry import Knob, Processor
from playground.spec import RunSpec
from tests.helpers import allowed_tiny_model

pytest.importorskip("jax")


class ToyBanJax:
    """The JAX side: the banned id's logit becomes -inf wherever it is among the candidates."""

    from playground.backends.jax.chain.chain import Needs

    needs = Needs()
    random = False

    def static(self, spec, context):
        return ()

    def args(self, spec, context):
        import numpy as np

        return (np.int32(spec.toy_banned_id),)

    def apply(self, cands, view, static, args):
        import jax.numpy as jnp

        ids = jnp.arange(cands.values.shape[-1])[None, :] if cands.ids is None else cands.ids
        return cands._replace(values=jnp.where(ids == args[0], -jnp.inf, cands.values))


def toy_ban_torch(spec, context):
    import torch
    from transformers import LogitsProcessor

    class ToyBan(LogitsProcessor):
        def __call__(self, input_ids, scores):
            banned = scores.clone()
            banned[:, spec.toy_banned_id] = -torch.inf
            return banned

    return ToyBan()


TOY_KNOB = Knob(name="toy_banned_id", kind=int, default=-1, low=-1, high=1_000_000, group="penalties",
                label="banned token id (-1 = none)", help="this token id is never chosen", sweep="distinct_2")
TOY_STAGE = Processor(name="toy_ban", label="ban token {toy_banned_id}", help="bans one token id",
                      knobs=("toy_banned_id",), samples_only=False, active=lambda spec: spec.toy_banned_id >= 0,
                      impl={"torch": toy_ban_torch, "jax": ToyBanJax})


@pytest.fixture
def toy_processor():
    with registry.registered(TOY_KNOB, TOY_STAGE):
        yield TOY_STAGE


@pytest.fixture
def local_model(tmp_path, monkeypatch):
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        yield path

def test_a_stage_without_a_jax_side_is_refused_on_jax_when_the_spec_is_built():
    """The JAX chain builder's promise: RunSpec refuses such a stage before a run reaches it, naming it, and only
    where it is on (off, it is not in the chain) and only on JAX."""
    torch_only = dataclasses.replace(TOY_STAGE, impl={"torch": toy_ban_torch})
    with registry.registered(TOY_KNOB, torch_only):
        with pytest.raises(PlaygroundError, match="backend=jax cannot run the logits chain's stage 'toy_ban'"):
            RunSpec.from_dict({"backend": "jax", "toy_banned_id": 3})
        assert RunSpec.from_dict({"backend": "torch", "toy_banned_id": 3}).toy_banned_id == 3
        assert RunSpec.from_dict({"backend": "jax", "toy_banned_id": -1}).backend == "jax"


PROMPT = "a stage of the chain owns its behaviour"


def test_toy_processor_is_a_spec_key_and_a_cli_flag(toy_processor):
    from playground.__main__ import build_parser, spec_from_args

    spec = RunSpec.from_dict({"toy_banned_id": 7})
    assert spec.toy_banned_id == 7 and spec.to_dict()["toy_banned_id"] == 7
    assert RunSpec().toy_banned_id == -1 and spec.replace(toy_banned_id=9).toy_banned_id == 9
    with pytest.raises(Exception, match=r"toy_banned_id=-5 is out of range"):
        RunSpec.from_dict({"toy_banned_id": -5})
    args = build_parser().parse_args(["run", "--prompt", "x", "--toy-banned-id", "3"])
    assert spec_from_args(args).toy_banned_id == 3


def test_toy_processor_runs_on_both_backends_and_bans_greedys_choice(toy_processor, local_model):
    spec = RunSpec(model=local_model, max_new_tokens=12)
    plain = runner.run_to_result(PROMPT, spec)
    banned = plain["token_ids"][0]
    results = {}
    for backend in ("torch", "jax"):
        results[backend] = runner.run_to_result(PROMPT, spec.replace(backend=backend, toy_banned_id=banned))
    assert results["torch"]["token_ids"] == results["jax"]["token_ids"]
    assert banned not in results["jax"]["token_ids"] and results["jax"]["token_ids"] != plain["token_ids"]
    for result in results.values():
        toy = [[stage for stage in record["stages"] if stage["stage"] == "toy_ban"] for record in result["tokens"]]
        assert all(len(stages) == 1 and stages[0]["removed"] == 1 for stages in toy)  # one token, every step
        assert toy[0][0]["moved"] > 0  # it took greedy's choice away
    # the banned id is a traced argument: banning another one compiles nothing new
    again = runner.run_to_result(PROMPT, spec.replace(backend="jax", toy_banned_id=results["jax"]["token_ids"][0]))
    assert again["metrics"]["compile_s"] == 0.0


def test_toy_processor_is_a_column_knob_a_sweep_knob_and_in_the_cut(toy_processor):
    from playground.sweep.knobs import parse_values, sweepable
    from playground.ui import cut
    from playground.ui.columns import relevant_keys
    from playground.ui.wiring import build_ui

    _, page = build_ui()
    widget = page.columns[0].knobs["toy_banned_id"]
    assert widget.label == "banned token id (-1 = none)" and (widget.minimum, widget.maximum) == (-1, 1_000_000)
    assert "toy_banned_id" in relevant_keys("greedy", "dynamic", "torch")  # a processor: every strategy
    assert "toy_banned_id" in sweepable() and parse_values("toy_banned_id", "3,5") == (3, 5)
    spec = RunSpec.from_dict({"toy_banned_id": 4}).to_dict()
    assert cut.filter_labels(spec)["toy_ban"] == "ban token 4"
    record = {"id": 1, "text": "b", "p": 1.0, "p_model": 0.5, "alternatives": [], "stages": [
        {"stage": "toy_ban", "removed": 1, "moved": 0.25}]}
    assert cut.applied_filters(record, spec) == "ban token 4 → greedy: the most likely token is taken"
    assert "ban token 4</td><td>1</td><td>0.250" in cut.stage_rows_html(record, spec)

"""The recorded transformers 4.52 references still describe our models: the tiny models rebuilt by their recipe
have the recorded weights, and greedy decoding on them gives the tokens both transformers releases gave when the
file was recorded (docs/guide-references.md). A failure here means the models moved, not a decoding method."""

import importlib.util
import json
from functools import cache
from pathlib import Path

import pytest
import torch

from tests.helpers import tiny_llama

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = json.loads((ROOT / "tests/references/guide_methods.json").read_text())
TINY = sorted(name for name, entry in REFERENCES["models"].items() if entry["kind"] == "tiny")


def weights_module():
    spec = importlib.util.spec_from_file_location("guide_weights", ROOT / "scripts/guide_references/weights.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_model(name: str) -> torch.nn.Module:
    """A tiny model of the file, built as the recording built it."""
    entry = REFERENCES["models"][name]
    model = tiny_llama(entry["seed"], **entry["overrides"])
    weights_module().set_reference_weights(model, entry["weights"]["seed"], entry["weights"]["std"])
    return model


@cache
def shared_model(name: str) -> torch.nn.Module:
    """`reference_model(name)`, built once per test process (the parity tests only read it)."""
    return reference_model(name)


def records(method: str, kind: str | None = None) -> list[dict]:
    """The file's records of one method, of every model or of one kind ("tiny", "bundled")."""
    return [r for r in REFERENCES["records"] if r["method"] == method
            and (kind is None or REFERENCES["models"][r["model"]]["kind"] == kind)]


def record_cases(method: str, kind: str, first_prompt: tuple = (), other_prompts: tuple = ()) -> list:
    """One method's records of one kind as test cases (ids: the records'), the first prompt's with the marks
    `first_prompt`, the others' with `other_prompts`: a lane keeps one prompt of a record set."""
    return [pytest.param(r, id=r["id"], marks=list(first_prompt if "/p0/" in r["id"] else other_prompts))
            for r in records(method, kind)]


def bundled_cases(method: str) -> list:
    """The bundled model's records of one method as test cases: the first prompt's in the full suite, the second
    prompt's (the same settings again) extended, since the tiny models hold every setting on both prompts."""
    return record_cases(method, "bundled", other_prompts=(pytest.mark.extended,))


def record_by_id(record_id: str) -> dict:
    return next(r for r in REFERENCES["records"] if r["id"] == record_id)


@pytest.mark.parametrize("name", TINY)
def test_each_tiny_model_rebuilds_to_the_recorded_weights_and_greedy_tokens(name):
    model = reference_model(name)
    assert weights_module().weights_digest(model) == REFERENCES["models"][name]["weights_digest"]
    checks = [c for c in REFERENCES["greedy_checks"] if c["model"] == name]
    assert checks and all(c["equal"] for c in checks)
    for check in checks:
        ids = torch.tensor([REFERENCES["models"][name]["prompts"][check["prompt"]]["ids"]])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=check["max_new_tokens"], pad_token_id=256)
        assert out[0, ids.shape[1]:].tolist()[:len(check["transformers_4_52"])] == check["transformers_4_52"]


def test_every_method_and_setting_the_issue_names_is_recorded_for_every_model():
    recorded = {(r["model"], r["method"], r["variant"]) for r in REFERENCES["records"]}
    for model in REFERENCES["models"]:
        for method, variant in (("contrastive_search", "alpha0.6-k4"), ("contrastive_search", "alpha0.3-k6"),
                                ("dola", "low-rep1.2"), ("dola", "high-rep1.2")):
            assert (model, method, variant) in recorded, (model, method, variant)
        beams = [r for r in REFERENCES["records"] if r["model"] == model and r["method"] == "diverse_beam_search"]
        assert beams and all(len(r["output"]["sequences"]) == 4 == len(r["output"]["sequences_scores"])
                             for r in beams)
    assert REFERENCES["reference"]["transformers"] == "4.52.4"

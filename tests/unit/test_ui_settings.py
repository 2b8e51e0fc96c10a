"""The columns' knobs and refusals, and reproducibility: settings JSON, links, exports and chat history."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from playground.compatibility import WEIGHT_LABELS
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from playground.ui.chat import history, messages, record_turn
from playground.ui.columns import column_settings, control_values, notice_text, problem, visibility, weights_choices
from playground.ui.draft_card import DRAFT_MODEL, PROMPT_LOOKUP
from playground.ui.export import (
    decode_url_state,
    encode_url_state,
    results_csv,
    results_json,
    settings_from_json,
    settings_to_json,
    write_exports,
)
from playground.ui.labels import base_label as label
from tests.unit.page_fakes import SETTINGS, VERSIONS, fake_result

# columns: knobs that apply, settings <-> controls


def test_only_the_knobs_of_the_current_choice_are_shown():
    shown = visibility("sampling", "dynamic", "torch", {"draft_source": DRAFT_MODEL})
    assert shown["sampling_knobs"] and not shown["beam_knobs"] and not shown["bits_knobs"] and not shown["devices"]
    shown = visibility("assisted", "sink", "jax", {"draft_source": PROMPT_LOOKUP})
    assert shown["draft_knobs"] and shown["prompt_lookup"] and not shown["assistant"]
    assert shown["window_box"] and shown["sink_tokens"] and shown["devices"]


def test_hidden_knobs_stay_out_of_the_settings_so_they_cannot_refuse_a_run():
    values = control_values({"strategy": "greedy"}) | {"num_return_sequences": 3.0, "temperature": 0.2}
    settings = column_settings(values)
    assert "num_return_sequences" not in settings and "temperature" not in settings
    assert problem(settings) == ""
    beam = column_settings(control_values({"strategy": "beam"}) | {"num_beams": 4.0, "num_return_sequences": 2.0})
    assert beam["num_return_sequences"] == 2 and isinstance(beam["num_beams"], int)


def test_assisted_column_takes_exactly_one_draft_source():
    values = control_values({"strategy": "assisted", "assistant": "smollm2-135m"})
    assert column_settings(values)["assistant"] == "smollm2-135m" and "prompt_lookup" not in column_settings(values)
    lookup = column_settings(values | {"draft_source": PROMPT_LOOKUP, "prompt_lookup": 7.0})
    assert lookup["prompt_lookup"] == 7 and "assistant" not in lookup
    assert control_values(lookup)["draft_source"] == PROMPT_LOOKUP


def test_an_assisted_column_drafts_by_prompt_lookup_unless_a_draft_model_is_given():
    """The main model drafting for itself accepts every draft and shows nothing; prompt lookup rejects some."""
    fresh = control_values({"strategy": "assisted"})
    assert fresh["draft_source"] == PROMPT_LOOKUP
    assert column_settings(fresh)["prompt_lookup"] == 10 and "assistant" not in column_settings(fresh)
    switched = control_values({"strategy": "greedy"}) | {"strategy": "assisted"}  # a column switched to assisted
    assert column_settings(switched)["prompt_lookup"] == 10


def test_assisted_sampling_is_a_column_control_that_brings_the_sampling_knobs():
    from playground.spec import RunSpec
    from playground.ui.columns import visibility

    values = control_values({"strategy": "assisted", "prompt_lookup": 4}) | {"temperature": 0.7, "top_k": 20.0}
    greedy = column_settings(values)
    assert "assisted_sampling" not in greedy and "temperature" not in greedy  # off: greedy, no sampling knobs
    sampled = column_settings(values | {"assisted_sampling": True})
    assert sampled["assisted_sampling"] is True and sampled["temperature"] == 0.7 and sampled["top_k"] == 20
    spec = RunSpec.from_dict(sampled)
    assert spec.assisted_sampling and spec.temperature == 0.7 and problem(sampled) == ""
    assert control_values(sampled)["assisted_sampling"] is True  # a shared link sets the box again
    assert visibility("assisted", "dynamic", "torch", None, True)["sampling_knobs"]
    assert not visibility("assisted", "dynamic", "torch", None, False)["sampling_knobs"]
    assert label(0, sampled) == "1: assisted (prompt lookup n=4, sampled) · dynamic"


def test_refused_combinations_are_flagged_with_the_reason():
    text = notice_text({"backend": "jax", "weights": "bf16"})
    assert text.startswith("⚠ ")
    assert "bf16 weights are not offered on the JAX path on a CPU: XLA on CPU hoists their conversion" in text
    assert notice_text({"backend": "jax", "weights": "int8"}) == ""
    assert weights_choices("jax") == [("fp32", "fp32"), ("bf16 ✗ on jax", "bf16"), ("int8", "int8"),
                                      ("nf4 ✗ on jax", "nf4"), (WEIGHT_LABELS["q4"], "q4")]
    assert WEIGHT_LABELS["q4"].startswith("q4: 4-bit")
    assert weights_choices("torch")[-1] == ("q4 ✗ on torch", "q4")
    assert all(label == value for label, value in weights_choices("torch")[:-1])
    assert notice_text({"backend": "jax", "strategy": "assisted", "cache": "sink", "prompt_lookup": 4}) == ""
    assert label(1, {"strategy": "beam", "cache": "static", "backend": "jax"}) == "2: beam · static · jax"
    assert label(1, {"strategy": "greedy", "cache": "static", "backend": "jax", "weights": "int8"}) == (
        "2: greedy · static · jax · int8")


# reproducibility: settings JSON, links, exports


def test_settings_json_round_trips_and_bad_settings_name_the_problem():
    assert settings_from_json(settings_to_json(SETTINGS)) == SETTINGS
    with pytest.raises(PlaygroundError, match="not valid JSON"):
        settings_from_json("{nope")
    with pytest.raises(PlaygroundError, match="column 2: temperature"):
        settings_from_json(json.dumps({**SETTINGS, "columns": [{}, {"temperature": -1.0}]}))
    with pytest.raises(PlaygroundError, match="seed, repeats and chat are page-wide"):
        settings_from_json(json.dumps({"columns": [{"seed": 3}]}))
    with pytest.raises(PlaygroundError, match="1 to 4"):
        settings_from_json(json.dumps({"columns": [{}] * 5}))
    with pytest.raises(PlaygroundError, match="unknown settings key"):
        settings_from_json(json.dumps({"colums": []}))


def test_url_state_round_trips_to_the_same_runs_and_rejects_garbage():
    token = encode_url_state(SETTINGS)
    assert token.isascii() and "=" not in token and "/" not in token and "+" not in token
    decoded = decode_url_state(token)
    assert (decoded["prompt"], decoded["seed"], decoded["mode"]) == (SETTINGS["prompt"], 7, "raw")
    for before, after in zip(SETTINGS["columns"], decoded["columns"], strict=True):
        assert RunSpec.from_dict(before) == RunSpec.from_dict(after)  # defaults dropped, the same run
    for bad in ("", "!!!", "eJzLSM3JyQcABiwCFQ", "A" * 20_000):
        with pytest.raises(PlaygroundError):
            decode_url_state(bad)
    with pytest.raises(PlaygroundError, match="this link is damaged") as refused:
        decode_url_state(token[: len(token) // 2])  # a link cut short when copied
    assert "zlib" not in str(refused.value) and "Error -" not in str(refused.value)


def test_exports_carry_settings_results_and_versions(tmp_path):
    results = [fake_result([1, 2]), None, fake_result([1, 3], speed=20)]
    labels = ["1: greedy", "2: x", "3: sampling"]
    exported = json.loads(results_json(SETTINGS, results))
    assert exported["versions"] == VERSIONS and exported["settings"] == SETTINGS
    assert [r["column"] for r in exported["results"]] == [1, 3]
    rows = list(csv.DictReader(io.StringIO(results_csv(results, labels))))
    assert [r["label"] for r in rows] == ["1: greedy", "3: sampling"]
    assert rows[1]["tokens_per_s"] == "20.0" and rows[0]["version_torch"] == "2.13.0" and rows[0]["text"] == "t1t2"
    assert rows[0]["forced_prefix"] == ""
    branched = fake_result([1, 2]) | {"prefix": {"ids": [7, 8], "text": "Once upon", "pieces": ["Once", " upon"]}}
    row = next(csv.DictReader(io.StringIO(results_csv([branched], ["1: greedy"]))))
    assert row["forced_prefix"] == "Once upon" and row["text"] == "t1t2"  # what was forced, then what was generated
    written = write_exports(SETTINGS, results, labels)
    assert written.json.exists() and written.csv.read_text().startswith("column,label,model")
    assert re.fullmatch(r"decoding-playground-\d{8}-\d{6}\.json", written.json.name)  # timestamped
    assert written.logprobs_csv.read_text().startswith("column,label,position,forced,id")


def test_exports_name_the_machine_and_only_the_knobs_that_applied():
    exported = json.loads(results_json(SETTINGS, [fake_result([1, 2]), fake_result([3], strategy="sampling")]))
    machine = exported["machine"]
    assert machine["cores"] >= 1 and machine["memory_bytes"] > 0 and machine["devices"]
    greedy, sampling = (r["spec"] for r in exported["results"])
    assert "temperature" not in greedy and "num_beams" not in greedy and "window" not in greedy
    assert sampling["temperature"] == 1.0 and "top_p" in sampling and "num_beams" not in sampling
    assert exported["settings"]["prompt"] == SETTINGS["prompt"]


# chat


def test_chat_history_keeps_each_columns_own_replies():
    conversation = record_turn([], "hi", {0: "hello", 1: "hey"})
    conversation = record_turn(conversation, "how are you?", {0: "fine"})
    assert history(conversation, 0) == [("hi", "hello"), ("how are you?", "fine")]
    assert history(conversation, 1) == [("hi", "hey")]
    assert messages(conversation, 1, "next", "partial")[-2:] == [{"role": "user", "content": "next"},
                                                                  {"role": "assistant", "content": "partial"}]

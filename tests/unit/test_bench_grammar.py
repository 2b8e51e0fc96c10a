"""bench --suite grammar's core on the in-memory byte tokenizer, for the picked engine (llguidance): a row with
every timing, masks that allowed each consumed token, and a matcher that accepts the whole sample."""

import json

import pytest

from playground.tools import bench_grammar
from tests.helpers import byte_tokenizer

pytest.importorskip("llguidance")


def test_a_regex_walk_reports_every_timing_and_masks_that_allowed_each_token():
    date = next(case for case in bench_grammar.cases(large=False) if case.name == "date")
    run = bench_grammar.measure_engine("llguidance", byte_tokenizer(), [date], rounds=1)
    assert run["engine"] == "llguidance" and run["vocab_size"] == 257 and run["setup_ms"] > 0
    (row,) = run["cases"]
    assert row["grammar"] == "date" and row["tokens"] == len("2026-11-28")  # one byte, one token
    assert row["masks_ok"] and row["accepting"] and row["failure"] is None
    for key in ("compile_ms", "first_mask_ms", "mask_ms", "mask_p90_ms", "rollback_ms", "replay_ms"):
        assert row[key] >= 0, key
    json.dumps(run)


def test_a_token_the_grammar_refuses_is_reported_not_raised():
    engine = bench_grammar.llguidance_engine(byte_tokenizer())
    date = bench_grammar.cases(large=False)[0]
    done = bench_grammar.walk(engine, engine.compile(date), byte_tokenizer().encode("20x6"))
    assert done["failure"] == f"step 2: the mask refuses token {byte_tokenizer().convert_tokens_to_ids('x')}"
    assert not done["accepting"] and len(done["masks"]) == 3

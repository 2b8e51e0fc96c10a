"""The guide's methods as strategies of the product: a RunSpec asks for one, the PyTorch path runs our loop
through generate(custom_generate=...), and the tokens are transformers 4.52.4's (tests/references), with the
token view's records and the streamed times of any other strategy. Where a method has no JAX plug-in or needs a
cache, RunSpec refuses the rest with the method's reason."""

from __future__ import annotations

import pytest
import torch

from playground import compatibility, registry
from playground.errors import PlaygroundError
from playground.spec import RunSpec
from tests.helpers import tiny_llama, tiny_loaded, torch_run
from tests.unit.test_guide_references import records, shared_model

CONTRASTIVE = records("contrastive_search", "tiny")


def _as_spec(record: dict) -> RunSpec:
    kwargs = record["generate_kwargs"]
    return RunSpec(strategy="contrastive", penalty_alpha=kwargs["penalty_alpha"], top_k=kwargs["top_k"],
                   max_new_tokens=kwargs["max_new_tokens"])


@pytest.mark.parametrize("record", CONTRASTIVE[:4], ids=[r["id"] for r in CONTRASTIVE[:4]])
def test_a_contrastive_column_gives_transformers_4_52_tokens(record):
    model = shared_model(record["model"])
    model.generation_config.eos_token_id = record["generate_kwargs"]["eos_token_id"]
    model.generation_config.pad_token_id = record["generate_kwargs"]["pad_token_id"]
    loaded = tiny_loaded(record["model"], model)
    ids = torch.tensor([record["prompt_ids"]])
    out, streamed = torch_run(loaded, ids, _as_spec(record))
    (expected,) = record["output"]["sequences"]
    assert out.sequences[0] == expected[:len(out.sequences[0])]
    assert streamed == out.sequences[0]  # streamed token by token through the loop's emit
    assert len(out.token_times) == len(streamed)  # each one timed as it arrived
    assert out.token_info is not None and len(out.token_info) == len(streamed)  # the token view's records
    for info, token in zip(out.token_info, out.sequences[0], strict=True):  # what the loop weighed, per token
        candidates = info["candidates"]
        assert len(candidates) == record["generate_kwargs"]["top_k"]
        assert [c[1] for c in candidates] == sorted((c[1] for c in candidates), reverse=True)
        assert max(candidates, key=lambda c: c[3])[0] == token  # the highest score is the token
        alpha = record["generate_kwargs"]["penalty_alpha"]
        assert all(abs((1 - alpha) * p - alpha * penalty - score) < 1e-5 for _, p, penalty, score in candidates)


def test_contrastive_search_is_refused_where_it_cannot_run_with_the_reason():
    with pytest.raises(PlaygroundError, match="repeated top_k times.*use cache 'dynamic'"):
        RunSpec(strategy="contrastive", cache="sink", top_k=4)
    assert RunSpec(strategy="contrastive", backend="jax", cache="sink", top_k=4).cache == "sink"  # JAX: every cache
    with pytest.raises(PlaygroundError, match="top_k=1 must be 2 to 64"):
        RunSpec(strategy="contrastive", top_k=1)
    assert "loops of their own" in compatibility.compile_refusal("default", "torch", "contrastive", "static", "fp32")


def test_the_compatibility_table_and_the_page_follow_the_entry():
    rows = {(r["backend"], r["strategy"]): r for r in compatibility.table()}
    assert rows[("torch", "contrastive")]["dynamic"] == "yes"
    assert all(rows[("torch", "contrastive")][c] == "no" for c in ("static", "quantized", "sliding", "sink"))
    assert all(v == "yes" for k, v in rows[("jax", "contrastive")].items() if k not in ("backend", "strategy"))
    from playground.ui import columns

    offered = {value for _, value in columns.strategy_choices("torch", "dynamic")}
    assert {"contrastive", "dola"} <= offered


def test_the_cli_runs_contrastive_search(tmp_path, monkeypatch, capfd):
    import json

    from playground.__main__ import main
    from tests.helpers import allowed_tiny_model

    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        main(["run", "--model", path, "--prompt", "hello", "--strategy", "contrastive", "--penalty-alpha", "0.6",
              "--top-k", "4", "--max-new-tokens", "6", "--min-new-tokens", "6", "--json"])
    captured = capfd.readouterr()
    result = json.loads(captured.out)
    assert "may be ignored" not in captured.err  # top_k is read, by our loop
    assert result["spec"]["strategy"] == "contrastive" and result["spec"]["penalty_alpha"] == 0.6
    assert result["new_tokens"] == 6 and len(result["tokens"]) == 6



DOLA = [r for r in records("dola", "tiny") if r["model"] in ("tiny-2l", "tiny-4l-tied")]


@pytest.mark.parametrize("record", DOLA, ids=[r["id"] for r in DOLA])
def test_a_dola_column_gives_transformers_4_52_tokens(record):
    kwargs = record["generate_kwargs"]
    model = shared_model(record["model"])
    model.generation_config.eos_token_id = kwargs["eos_token_id"]
    model.generation_config.pad_token_id = kwargs["pad_token_id"]
    spec = RunSpec(strategy="dola", dola_layers=kwargs["dola_layers"], repetition_penalty=kwargs["repetition_penalty"],
                   max_new_tokens=kwargs["max_new_tokens"])
    out, streamed = torch_run(tiny_loaded(record["model"], model), torch.tensor([record["prompt_ids"]]), spec)
    (expected,) = record["output"]["sequences"]
    assert out.sequences[0] == expected[:len(out.sequences[0])] and streamed == out.sequences[0]
    assert len(out.token_times) == len(streamed)
    assert out.token_info is not None and len(out.token_info) == len(streamed)
    for info in out.token_info:  # the layer contrasted is the candidate most unlike the final layer
        contrast = info["dola"]
        assert contrast["layer"] in contrast["layers"] and len(contrast["js"]) == len(contrast["layers"])
        if len(contrast["layers"]) > 1:
            assert contrast["layers"][max(range(len(contrast["js"])), key=contrast["js"].__getitem__)] == \
                contrast["layer"]


def test_dola_layers_are_refused_in_a_form_it_cannot_read():
    with pytest.raises(PlaygroundError, match="dola_layers='middle' is not 'low', 'high' or comma-separated"):
        RunSpec(strategy="dola", dola_layers="middle")
    assert RunSpec(strategy="dola", dola_layers="0,2").dola_layers == "0,2"


def test_a_model_a_method_cannot_serve_is_refused_before_it_loads():
    from playground.backends.refusals import check_cache
    from tests.helpers import tiny_gemma

    config = tiny_gemma().config  # sliding layers around a global one; three layers
    with pytest.raises(PlaygroundError, match="contrastive search cannot run on model_type='gemma3_text'"):
        check_cache(RunSpec(strategy="contrastive", top_k=4), config)
    with pytest.raises(PlaygroundError, match="dola_layers='low' leaves no candidate layer in a 3-layer model"):
        check_cache(RunSpec(strategy="dola", dola_layers="low"), config)
    with pytest.raises(PlaygroundError, match=r"layer indices in \[0, 3\)"):
        check_cache(RunSpec(strategy="dola", dola_layers="7"), config)
    check_cache(RunSpec(strategy="dola", dola_layers="0,2"), config)


@pytest.mark.parametrize("cache", ["static", "quantized", "sliding", "sink"])
def test_dola_runs_on_every_cache_and_a_full_one_gives_the_dynamic_caches_tokens(cache, capfd):
    from tests.helpers import tiny_llama

    loaded = tiny_loaded("tiny", tiny_llama(seed=2))
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    spec = RunSpec(strategy="dola", dola_layers="0", repetition_penalty=1.2, max_new_tokens=12, min_new_tokens=12)
    plain, _ = torch_run(loaded, ids, spec)
    knobs = {"quantized": {"cache_bits": 8}, "sliding": {"window": 64}, "sink": {"window": 64, "sink_tokens": 4}}
    out, _ = torch_run(loaded, ids, spec.replace(cache=cache, **knobs.get(cache, {})))
    assert len(out.sequences[0]) == 12
    if cache in ("static", "sliding", "sink"):  # nothing evicted or rounded within 17 positions
        assert out.sequences == plain.sequences
    assert "may be ignored" not in capfd.readouterr().err


def test_the_memory_budget_counts_contrastive_searchs_top_k_cache_rows():
    from playground.backends.torch.backend import TorchBackend

    loaded = tiny_loaded("tiny")
    backend = TorchBackend()
    greedy = backend.memory_needed(loaded, RunSpec(max_new_tokens=32), 16, None).run
    wide = backend.memory_needed(loaded, RunSpec(strategy="contrastive", top_k=8, max_new_tokens=32), 16,
                                 None).run
    assert wide.bytes == 8 * greedy.bytes and "x 8 sequence(s)" in wide.what and "lower top_k" in wide.hint


DIVERSE = records("diverse_beam_search", "tiny")


def _diverse_spec(record: dict, **changed) -> RunSpec:
    kwargs = record["generate_kwargs"]
    return RunSpec(strategy="diverse_beam", num_beams=kwargs["num_beams"], num_beam_groups=kwargs["num_beam_groups"],
                   diversity_penalty=kwargs["diversity_penalty"], num_return_sequences=kwargs["num_return_sequences"],
                   length_penalty=kwargs["length_penalty"], max_new_tokens=kwargs["max_new_tokens"], **changed)


@pytest.mark.parametrize("record", DIVERSE[:2], ids=[r["id"] for r in DIVERSE[:2]])
def test_a_diverse_beam_column_gives_transformers_4_52_sequences_scores_and_a_tree_by_group(record):
    model = shared_model(record["model"])
    model.generation_config.eos_token_id = record["generate_kwargs"]["eos_token_id"]
    model.generation_config.pad_token_id = record["generate_kwargs"]["pad_token_id"]
    out, streamed = torch_run(tiny_loaded(record["model"], model), torch.tensor([record["prompt_ids"]]),
                              _diverse_spec(record))
    assert out.sequences == record["output"]["sequences"] and streamed == out.sequences[0]
    assert out.scores == pytest.approx(record["output"]["sequences_scores"], abs=1e-4)
    tree = out.beam_tree
    assert tree is not None and {node["group"] for step in tree for node in step} == {0, 1}
    chosen = [next(node for node in step if node["chosen"])["token"] for step in tree if any(n["chosen"] for n in step)]
    assert chosen == out.sequences[0][:len(chosen)] and len(chosen) >= len(out.sequences[0]) - 1  # the best's path


def test_diverse_beam_search_runs_on_every_cache_and_a_full_one_gives_the_dynamic_caches_sequences():
    record = DIVERSE[0]
    model = shared_model(record["model"])
    model.generation_config.eos_token_id = record["generate_kwargs"]["eos_token_id"]
    model.generation_config.pad_token_id = record["generate_kwargs"]["pad_token_id"]
    loaded, ids = tiny_loaded(record["model"], model), torch.tensor([record["prompt_ids"]])
    runs = {cache: torch_run(loaded, ids, _diverse_spec(record, cache=cache, window=8, sink_tokens=2,
                                                         cache_bits=8))[0]
            for cache in registry.cache_names()}
    assert runs["static"].sequences == runs["dynamic"].sequences == record["output"]["sequences"]
    assert runs["static"].scores == pytest.approx(runs["dynamic"].scores, abs=1e-5)
    for bounded in ("sliding", "sink"):  # 4 beams' rows of at most 8 positions, far below 32 tokens' worth
        assert len(runs[bounded].sequences) == 4 and runs[bounded].kv_cache_bytes < runs["dynamic"].kv_cache_bytes / 2


def test_diverse_beam_search_is_refused_where_it_cannot_run_with_the_reason():
    with pytest.raises(PlaygroundError, match="num_beam_groups=3 must divide num_beams=4"):
        RunSpec(strategy="diverse_beam", num_beams=4, num_beam_groups=3)
    assert RunSpec(strategy="diverse_beam", backend="jax").backend == "jax"  # its JAX plug-in: diverse_beam.py
    with pytest.raises(PlaygroundError, match="diversity_penalty"):
        RunSpec(strategy="diverse_beam", diversity_penalty=0.0)


@pytest.mark.parametrize("knobs", [{"temperature": 0.8, "top_k": 20},
                                   {"temperature": 1.3, "top_p": 0.9, "min_p": 0.05}])
def test_beam_sampling_is_transformers_own_beam_sample_with_the_chain_in_front(knobs):
    """The product's beam_sample (our chain appended to generate's list) draws what transformers' own beam sampling
    draws with the same warpers and seed, every returned sequence and score; and it keeps a beam tree."""
    model = tiny_llama(seed=9)
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = 256
    prompt = torch.tensor([[5, 17, 42, 99, 3, 250]])
    spec = RunSpec(strategy="beam_sample", num_beams=3, num_return_sequences=3, max_new_tokens=10, seed=4, **knobs)
    out, _ = torch_run(tiny_loaded("tiny-beam-sample", model), prompt, spec)
    torch.manual_seed(4)
    own = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, num_beams=3,
                         num_return_sequences=3, max_new_tokens=10, return_dict_in_generate=True, output_scores=True,
                         **{"top_k": spec.top_k, **knobs})
    assert out.sequences == [_cut(row[prompt.shape[1]:]) for row in own.sequences.tolist()]
    assert out.scores == pytest.approx(own.sequences_scores.tolist(), abs=1e-5)
    assert out.beam_tree and any(node["chosen"] for node in out.beam_tree[0])
    greedy_beam, _ = torch_run(tiny_loaded("tiny-beam-sample", model), prompt, spec.replace(strategy="beam"))
    assert greedy_beam.sequences != out.sequences  # it does sample


def _cut(ids: list[int]) -> list[int]:
    return ids[:ids.index(256) + 1] if 256 in ids else ids

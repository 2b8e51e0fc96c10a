"""On a CUDA GPU: the device object, greedy parity between the backends and against the CPU, every cache on
each strategy, bitsandbytes int8 and nf4 on torch, JAX's compile cache, and the budget read from GPU memory.

Run by scripts/device-check.sh on a GPU machine; skipped elsewhere (tests/gpu/conftest.py).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import torch

from playground import compatibility, device, registry
from playground.errors import PlaygroundError
from playground.models import memory
from playground.models.catalog import BUNDLED
from playground.spec import RunSpec
from tests.helpers import ROOT, allowed_tiny_model, encoded, jax_run, tiny_gemma, tiny_llama, tiny_loaded, torch_run

PROMPT = torch.tensor([[5, 17, 42, 99, 3, 250]])
NEW = 16
# what decides the tokens: the same on the CPU and the GPU for these strategies (sampling draws from
# different generators on the two devices, and is checked for reproducibility instead)
DETERMINISTIC = ("greedy", "beam", "assisted", "contrastive")
# quantized keys and values round differently on the two backends (quanto's groups against the JAX path's own),
# so their tokens part; tests/unit/test_jax_caches.py compares the two errors instead
LOSSY_ACROSS_BACKENDS = ("quantized",)


def _spec(strategy: str = "greedy", cache: str = "dynamic", backend: str = "torch", **values) -> RunSpec:
    extra = {"prompt_lookup": 3} if strategy == "assisted" else {}
    if strategy == "beam":
        extra["num_beams"] = 3
    if strategy == "sampling":
        extra.update(temperature=0.9, seed=7)
    if strategy == "contrastive":
        extra.update(penalty_alpha=0.6, top_k=4)
    return RunSpec(backend=backend, strategy=strategy, cache=cache, max_new_tokens=NEW, min_new_tokens=NEW,
                   **{**extra, **values})


def _on(model: torch.nn.Module, where: str) -> torch.nn.Module:
    return copy.deepcopy(model).to(where).eval()


@pytest.fixture(scope="module")
def llama_pair():
    """The same tiny Llama on the CPU and on the GPU, each wrapped as the catalog hands models out."""
    model = tiny_llama(seed=3)
    return tiny_loaded("tiny-cpu", _on(model, "cpu")), tiny_loaded("tiny-gpu", _on(model, "cuda"))


def test_the_process_device_is_the_gpu():
    found = device.current()
    properties = torch.cuda.get_device_properties(0)
    assert found.kind == "cuda" and found.name == properties.name
    assert found.label == f"GPU ({properties.name})"
    assert found.memory() == (properties.total_memory, "GPU memory")
    import jax

    assert jax.default_backend() == "gpu" and found.jax_device().platform == "gpu"


def test_the_budget_is_read_from_gpu_memory(monkeypatch):
    monkeypatch.delenv("PLAYGROUND_MEMORY_BUDGET", raising=False)
    total = torch.cuda.get_device_properties(0).total_memory
    assert memory.budget_bytes() == int(total * memory.DEFAULT_BUDGET_SHARE)


@pytest.mark.parametrize("build", [tiny_llama, tiny_gemma], ids=["llama", "gemma3"])
def test_greedy_is_the_same_on_both_backends_and_on_the_cpu(build):
    model = build(seed=1)
    on_cpu, on_gpu = tiny_loaded("tiny-cpu", _on(model, "cpu")), tiny_loaded("tiny-gpu", _on(model, "cuda"))
    spec = _spec()
    _, cpu_tokens = torch_run(on_cpu, PROMPT, spec)
    _, gpu_tokens = torch_run(on_gpu, PROMPT, spec)
    _, chunks = jax_run(on_gpu, PROMPT, spec.replace(backend="jax"))
    assert gpu_tokens == cpu_tokens
    assert [t for c in chunks for t in c] == cpu_tokens


CELLS = [(s.name, c.name) for s in registry.strategies() for c in registry.caches()
         if any(compatibility.refusal(b, s.name, c.name) is None for b in registry.backend_names())]


@pytest.mark.parametrize(("strategy", "cache"), CELLS, ids=[f"{s}-{c}" for s, c in CELLS])
def test_every_cache_on_each_strategy(llama_pair, strategy, cache):
    """Torch on the GPU gives the CPU's tokens and JAX on the GPU gives torch's, for the strategies whose
    tokens do not depend on a random generator; a seeded sampling run repeats itself on each backend."""
    on_cpu, on_gpu = llama_pair
    spec = _spec(strategy, cache)
    runs = {}
    for backend in ("torch", "jax"):
        if compatibility.refusal(backend, strategy, cache) is not None:
            continue
        if backend == "torch":
            out, _ = torch_run(on_gpu, PROMPT, spec)
        else:
            out, _ = jax_run(on_gpu, PROMPT, spec.replace(backend="jax"))
        runs[backend] = out.sequences
    assert runs, f"{strategy} x {cache} is refused on both backends"
    if strategy in DETERMINISTIC:
        if "torch" in runs:
            cpu, _ = torch_run(on_cpu, PROMPT, spec)
            assert runs["torch"] == cpu.sequences
        if len(runs) == 2 and cache not in LOSSY_ACROSS_BACKENDS:
            assert runs["jax"] == runs["torch"]
    else:
        again, _ = torch_run(on_gpu, PROMPT, spec) if "torch" in runs else jax_run(on_gpu, PROMPT,
                                                                                spec.replace(backend="jax"))
        assert again.sequences == runs["torch" if "torch" in runs else "jax"]
    assert all(len(s) == NEW for s in next(iter(runs.values())))


@pytest.mark.parametrize("weights", ["int8", "nf4"])
def test_bitsandbytes_weights_run_on_the_gpu(monkeypatch, tmp_path, weights):
    pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed")
    from playground.models.loaded import LOADED
    from playground.runner import run_to_result

    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        loaded, _ = LOADED.get(path, weights)
        linear = loaded.model.model.layers[0].self_attn.q_proj
        assert linear.weight.device.type == "cuda"
        assert type(linear).__module__.startswith("bitsandbytes")  # quantized, on bitsandbytes' GPU kernels
        first = run_to_result("hello", RunSpec(model=path, weights=weights, max_new_tokens=NEW, min_new_tokens=NEW))
        again = run_to_result("hello", RunSpec(model=path, weights=weights, max_new_tokens=NEW, min_new_tokens=NEW))
    assert first["new_tokens"] == NEW and first["token_ids"] == again["token_ids"]
    assert first["device"].startswith("GPU (")


def test_the_jax_path_refuses_weights_it_has_no_gpu_decoder_for():
    for weights in ("bf16", "nf4"):
        with pytest.raises(PlaygroundError, match="on a GPU"):
            compatibility.check_combination(RunSpec(backend="jax", weights=weights))


_RESTART = """
import json, torch
from playground.backends.jax import decoder
from playground.spec import RunSpec
from tests.helpers import tiny_llama, tiny_loaded
spec = RunSpec(backend="jax", cache="static", max_new_tokens=12, min_new_tokens=12)
out = decoder.generate(tiny_loaded("tiny", tiny_llama()), [5, 17, 42], spec, lambda c: None,
                       lambda: False)
print(json.dumps({"compile_s": out.compile_s, "tokens": out.sequences[0]}))
"""


def test_a_restarted_process_loads_its_gpu_programs_from_disk(tmp_path):
    env = {**os.environ, "PLAYGROUND_CACHE": str(tmp_path), "PLAYGROUND_COMPILE_CACHE": "1"}

    def run() -> dict:
        done = subprocess.run([sys.executable, "-c", _RESTART], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"the restarted process failed:\n{done.stderr[-3000:]}"
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = run()
    entries = sorted(p.name for p in (tmp_path / "jax").iterdir())
    assert entries, "nothing was written to $PLAYGROUND_CACHE/jax"
    warm = run()
    assert sorted(p.name for p in (tmp_path / "jax").iterdir()) == entries  # every program came from disk
    assert warm["tokens"] == cold["tokens"]
    assert warm["compile_s"] < cold["compile_s"]


@pytest.mark.parametrize("name", list(BUNDLED))
def test_a_bundled_model_gives_the_same_greedy_tokens_on_both_backends_and_on_the_cpu(name):
    if not BUNDLED[name].installed:
        pytest.skip(f"bundled model {name}: its package {BUNDLED[name].package} is not installed here")
    from playground.models.loaded import LOADED

    loaded, _ = LOADED.get(name, "fp32")
    assert loaded.model.device.type == "cuda"
    ids = encoded(loaded, "The capital of France is")
    spec = RunSpec(model=name, max_new_tokens=48, min_new_tokens=48)
    _, gpu_tokens = torch_run(loaded, ids, spec)
    _, chunks = jax_run(loaded, ids, spec.replace(backend="jax"))
    from playground.models.loaded import LoadedModel

    on_cpu = LoadedModel(name, "fp32", _on(loaded.model, "cpu"), loaded.tokenizer, 0.0, loaded.instruct)
    _, cpu_tokens = torch_run(on_cpu, ids, spec)
    assert gpu_tokens == cpu_tokens
    assert [t for c in chunks for t in c] == gpu_tokens


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_torch_compile_on_the_gpu_gives_eagers_tokens_and_compiles_apart(monkeypatch, tmp_path, mode):
    from playground.runner import run_to_result

    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        spec = RunSpec(model=path, cache="static", max_new_tokens=NEW, min_new_tokens=NEW)
        eager = run_to_result("hello", spec)
        compiled = run_to_result("hello", spec.replace(torch_compile=mode))
        again = run_to_result("hello", spec.replace(torch_compile=mode))
    assert compiled["token_ids"] == eager["token_ids"] == again["token_ids"]
    assert compiled["metrics"]["compile_s"] > 0 and again["metrics"]["compile_s"] == 0
    assert compiled["device"].startswith("GPU (")

"""The device object: which device a process picks, what the budget, the JAX engine, the refusals and the
loader read from it, and what a column says it ran on. A GPU is stood in by a Device of kind "cuda" where only
its data matters; tests/gpu runs on a real one."""

from __future__ import annotations

import re

import pytest
import torch

from playground import compatibility, device
from playground.errors import PlaygroundError
from playground.models import memory
from playground.spec import RunSpec
from tests.helpers import allowed_tiny_model

GIB = 2**30


def _gpu(memory_bytes: int = 16 * GIB) -> device.Device:
    return device.Device("cuda", "NVIDIA L4", memory_bytes, {}, "highest", dict(device.CUDA_JAX_REFUSALS))


@pytest.fixture
def on_a_gpu(monkeypatch):
    found = _gpu()
    monkeypatch.setattr(device, "current", lambda: found)
    return found


def test_this_machine_is_a_cpu_and_says_which():
    found = device.current()
    assert found.kind == "cpu" and found.torch_device == "cpu" and found.jax_platform == "cpu"
    assert found.label == f"CPU ({device.cpu_name()})"
    assert found.jax_device().platform == "cpu"


@pytest.mark.parametrize(("value", "wanted"), [("", None), ("auto", None), ("cpu", "cpu"), ("CUDA", "cuda")])
def test_the_device_can_be_chosen(monkeypatch, value, wanted):
    monkeypatch.setenv("PLAYGROUND_DEVICE", value)
    assert device.requested() == wanted


def test_a_device_that_is_not_one_is_refused(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_DEVICE", "tpu")
    with pytest.raises(PlaygroundError, match="PLAYGROUND_DEVICE='tpu' is not a device; use one of: auto, cpu, cuda"):
        device.detect()


def test_insisting_on_a_gpu_without_one_says_what_is_missing(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_DEVICE", "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(PlaygroundError, match="torch sees no CUDA device; run scripts/setup.sh --gpu"):
        device.detect()


def test_a_gpu_is_used_only_when_both_paths_have_it(monkeypatch):
    monkeypatch.delenv("PLAYGROUND_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(device, "_jax_has_gpu", lambda: False)  # a CPU build of JAX beside CUDA torch
    assert device.detect().kind == "cpu"
    monkeypatch.setattr(device, "_jax_has_gpu", lambda: True)
    monkeypatch.setattr(device, "cuda_device", _gpu)
    assert device.detect().kind == "cuda"
    monkeypatch.setenv("PLAYGROUND_DEVICE", "cpu")
    assert device.detect().kind == "cpu"


def test_the_budget_shares_out_the_gpus_memory_on_a_gpu(monkeypatch, on_a_gpu):
    monkeypatch.delenv("PLAYGROUND_MEMORY_BUDGET", raising=False)
    assert on_a_gpu.memory() == (16 * GIB, "GPU memory")
    assert memory.budget_bytes() == int(16 * GIB * memory.DEFAULT_BUDGET_SHARE)


def test_the_budget_shares_out_the_hosts_memory_on_a_cpu(monkeypatch):
    from playground import host

    monkeypatch.delenv("PLAYGROUND_MEMORY_BUDGET", raising=False)
    assert device.current().memory() == (host.limits().memory_bytes, host.limits().memory_source)
    assert memory.budget_bytes() == int(host.limits().memory_bytes * memory.DEFAULT_BUDGET_SHARE)


def test_the_jax_paths_refusals_are_the_devices(on_a_gpu):
    assert "on a GPU" in compatibility.weights_refusal("jax", "bf16")
    assert "on a GPU" in compatibility.weights_refusal("jax", "q4")
    assert compatibility.weights_refusal("torch", "nf4") is None
    with pytest.raises(PlaygroundError, match="backend=jax weights=nf4 cannot run: 4-bit weights are not offered "
                                              "on the JAX path on a GPU"):
        compatibility.check_combination(RunSpec(backend="jax", weights="nf4"))


def test_the_refusals_on_a_machine_without_a_gpu_need_no_torch(monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "torch")
    monkeypatch.setattr(device, "NVIDIA_DRIVER", device.Path("/nonexistent"))
    monkeypatch.setattr(device, "current", lambda: pytest.fail("detected the device: that imports torch"))
    assert device.jax_refusals() == device.CPU_JAX_REFUSALS


def test_on_a_cpu_the_refusals_give_the_reason_and_no_one_machines_figures():
    """A refusal says why (slower than fp32, from how XLA on CPU lowers the product) and where the measurements
    are; the figures themselves belong to a dated machine in the docs, not to every machine's message."""
    for weights, why in (("bf16", "slower than fp32"), ("nf4", "use q4")):
        reason = compatibility.weights_refusal("jax", weights)
        assert reason is not None and why in reason and "docs/jax-path.md" in reason
        assert not re.search(r"\d(\.\d+)? ?(tok/s|ms|s|GB/s)\b", reason), reason
    assert compatibility.weights_refusal("jax", "int8") is None and compatibility.weights_refusal("jax", "q4") is None
    assert "for 4-bit on PyTorch use nf4" in compatibility.weights_refusal("torch", "q4")


def test_the_jax_engine_compiles_with_the_devices_options():
    from playground.backends.jax.engine import engine

    for name, value in device.current().xla_options.items():
        assert engine.COMPILER_OPTIONS[name] == value


def test_dlpack_shares_only_aligned_tensors_of_the_same_device(on_a_gpu):
    cpu = device.cpu_device()
    aligned = torch.zeros(64)
    assert cpu.shares_with_jax(aligned)
    assert not cpu.shares_with_jax(torch.zeros(65)[1:])  # 4 bytes past a 64-byte boundary
    assert not cpu.shares_with_jax(torch.zeros(8, 8).t())  # not contiguous
    assert not on_a_gpu.shares_with_jax(aligned)  # a host tensor is not on the GPU


def test_bitsandbytes_quantizes_as_the_weights_reach_the_gpu():
    from playground.models.loaded import _load_kwargs

    assert _load_kwargs("int8", "cuda")["device_map"] == {"": "cuda"}
    assert "device_map" not in _load_kwargs("nf4", "cpu")
    assert "device_map" not in _load_kwargs("fp32", "cuda")  # moved after loading


def test_a_column_says_where_it_ran(tmp_path, monkeypatch):
    from playground.runner import run_to_result
    from playground.ui.run import done_notice

    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as path:
        result = run_to_result("hello", RunSpec(model=path, max_new_tokens=3, min_new_tokens=3))
    assert result["device"] == device.current().label
    assert f"on {device.current().label}" in done_notice(result)


def test_no_module_but_the_device_names_a_cpu_only_compiler_flag_or_picks_a_device_itself():
    from tests.helpers import ROOT

    for path in (ROOT / "playground").rglob("*.py"):
        if path.name == "device.py":
            continue
        text = path.read_text()
        assert "xla_cpu_" not in text, f"{path}: a CPU compiler flag belongs to the device object"
        assert "jax.devices()[0]" not in text, f"{path}: the device object names JAX's device"

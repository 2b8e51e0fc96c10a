"""scripts/setup.sh picks the CPU or the GPU builds: --gpu, PLAYGROUND_CPU_ONLY=1, or a GPU that nvidia-smi lists.

Each test runs the script from a copy of it and of the requirement files, with --print-plan or
--print-requirements (nothing is installed, no network), a fake `nvidia-smi` on PATH where a GPU should be
found, and a fake Python that passes or fails the script's Python-version check for the GPU pins."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
FILES = ("requirements.txt", "requirements-gpu.txt", "requirements-models.txt", "requirements-dev.txt")
LISTS_A_GPU = 'echo "GPU 0: NVIDIA H200 (UUID: GPU-2f5c6d1e-0000-0000-0000-000000000000)"'
LISTS_EIGHT = 'for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; done'
LISTS_NONE = 'echo "No devices were found"; exit 6'  # what nvidia-smi says with a driver and no GPU


def run_setup(tmp_path: Path, *args: str, nvidia_smi: str | None = None, python_new_enough: bool = True,
              cpu_only: str | None = None) -> subprocess.CompletedProcess[str]:
    repo = tmp_path / "repo"
    if not repo.exists():
        (repo / "scripts").mkdir(parents=True)
        shutil.copy(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
        for name in FILES:
            shutil.copy(ROOT / name, repo / name)
    # PATH is one folder: links to this machine's commands except a real nvidia-smi (so that "no GPU" holds on a
    # GPU machine too, where nvidia-smi may sit in /usr/bin beside bash), then the fakes
    fake = tmp_path / "bin"
    if not fake.exists():
        fake.mkdir()
        for folder in os.environ["PATH"].split(os.pathsep):
            for command in (Path(folder).iterdir() if folder and Path(folder).is_dir() else ()):
                if command.name != "nvidia-smi" and not os.path.lexists(fake / command.name):
                    (fake / command.name).symlink_to(command)
    (fake / "nvidia-smi").unlink(missing_ok=True)
    tools = {"python": "exit 0" if python_new_enough else "exit 1"}
    if nvidia_smi is not None:
        tools["nvidia-smi"] = nvidia_smi
    for name, body in tools.items():
        (fake / name).unlink(missing_ok=True)  # never write through a link into this machine's own command
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PLAYGROUND_CPU_ONLY"}
    env.update(PATH=str(fake), PYTHON=str(fake / "python"))
    if cpu_only is not None:
        env["PLAYGROUND_CPU_ONLY"] = cpu_only
    return subprocess.run([str(fake / "bash"), str(repo / "scripts" / "setup.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=60)


def plan(tmp_path: Path, *args: str, **kwargs: Any) -> list[str]:
    done = run_setup(tmp_path, "--print-plan", *args, **kwargs)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "repo" / ".venv").exists()  # a plan creates and installs nothing
    return done.stdout.splitlines()


def stamp(*names: str, prefix: str = "") -> str:
    digest = hashlib.sha256(b"".join((ROOT / name).read_bytes() for name in names)).hexdigest()[:16]
    return f".venv/.installed-{prefix}{digest}"


def test_no_nvidia_smi_keeps_the_cpu_builds_and_the_stamp_of_before(tmp_path: Path) -> None:
    assert plan(tmp_path) == ["cpu", "requirements.txt requirements-models.txt",
                              stamp("requirements.txt", "requirements-models.txt")]
    dev = ("requirements.txt", "requirements-models.txt", "requirements-dev.txt")
    assert plan(tmp_path, "--dev") == ["cpu", " ".join(dev), stamp(*dev)]


def test_nvidia_smi_without_a_gpu_keeps_the_cpu_builds(tmp_path: Path) -> None:
    assert plan(tmp_path, nvidia_smi=LISTS_NONE)[0] == "cpu"


def test_a_gpu_that_nvidia_smi_lists_picks_the_gpu_builds_with_a_stamp_of_their_own(tmp_path: Path) -> None:
    gpu = ("requirements.txt", "requirements-gpu.txt", "requirements-models.txt")
    assert plan(tmp_path, nvidia_smi=LISTS_A_GPU) == ["gpu", " ".join(gpu), stamp(*gpu, prefix="gpu-")]
    assert plan(tmp_path, nvidia_smi=LISTS_EIGHT)[0] == "gpu"
    # switching builds reinstalls: the GPU stamps are never the CPU ones
    assert plan(tmp_path, "--dev", nvidia_smi=LISTS_A_GPU) == [
        "gpu", " ".join(gpu + ("requirements-dev.txt",)), stamp(*gpu, "requirements-dev.txt", prefix="gpu-")]


@pytest.mark.parametrize("args", [("--gpu",), ("--dev", "--gpu"), ("--gpu", "--dev")])
def test_gpu_flag_asks_for_the_gpu_builds_without_a_gpu_in_any_order(tmp_path: Path, args: tuple[str, ...]) -> None:
    lines = plan(tmp_path, *args)
    assert lines[0] == "gpu" and "requirements-gpu.txt" in lines[1].split()
    assert ("requirements-dev.txt" in lines[1].split()) == ("--dev" in args)


def test_cpu_only_overrides_the_found_gpu_but_not_the_gpu_flag(tmp_path: Path) -> None:
    assert plan(tmp_path, nvidia_smi=LISTS_A_GPU, cpu_only="1")[0] == "cpu"
    assert plan(tmp_path, nvidia_smi=LISTS_A_GPU, cpu_only="0")[0] == "gpu"
    assert plan(tmp_path, "--gpu", nvidia_smi=LISTS_A_GPU, cpu_only="1")[0] == "gpu"


def test_a_python_too_old_for_the_gpu_pins(tmp_path: Path) -> None:
    # a found GPU falls back to the CPU builds and says why; --gpu stops before installing anything
    found = run_setup(tmp_path, "--print-plan", nvidia_smi=LISTS_A_GPU, python_new_enough=False)
    assert found.returncode == 0 and found.stdout.splitlines()[0] == "cpu"
    assert "Python 3.12" in found.stderr
    asked = run_setup(tmp_path, "--print-plan", "--gpu", python_new_enough=False)
    assert asked.returncode == 1 and asked.stdout == "" and "Python 3.12" in asked.stderr
    # the GPU list for a GPU Space prints from any machine
    listed = run_setup(tmp_path, "--print-requirements", "--gpu", python_new_enough=False)
    assert listed.returncode == 0 and "torch==2.11.0" in listed.stdout.splitlines()


def test_an_unknown_argument_is_refused(tmp_path: Path) -> None:
    done = run_setup(tmp_path, "--cuda")
    assert done.returncode == 2 and "usage:" in done.stderr


def pin_list(text: str) -> dict[str, Requirement]:
    found: dict[str, Requirement] = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            requirement = Requirement(line)
            assert requirement.name.lower() not in found, f"{requirement.name} pinned twice"
            found[requirement.name.lower()] = requirement
    return found


def test_the_gpu_list_is_requirements_txt_with_the_gpu_pins_over_it(tmp_path: Path) -> None:
    cpu = pin_list((ROOT / "requirements.txt").read_text())
    overlay = pin_list((ROOT / "requirements-gpu.txt").read_text())
    assert all(len(r.specifier) == 1 and next(iter(r.specifier)).operator == "==" for r in overlay.values())
    assert "download.pytorch.org" not in (ROOT / "requirements-gpu.txt").read_text()  # PyPI's torch is the CUDA build
    assert {"torch", "jax", "jaxlib"} <= overlay.keys() and "cuda13" in overlay["jax"].extras

    done = run_setup(tmp_path, "--print-requirements", "--gpu")
    assert done.returncode == 0, done.stderr
    merged = pin_list(done.stdout)  # one pin per package: no installer sees two torches
    assert merged == {**cpu, **overlay}
    assert str(merged["torchax"]) == str(cpu["torchax"])  # a name that starts with torch is not overridden

    same = run_setup(tmp_path, "--print-requirements")
    assert same.returncode == 0 and same.stdout == (ROOT / "requirements.txt").read_text()

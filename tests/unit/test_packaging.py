"""What a Space and `pip install .` read stays consistent: the front matter, the pins, the CPU torch, the package."""

import shutil
import subprocess
import sys
import zipfile

import pytest
import yaml
from packaging.requirements import Requirement

from playground.models import catalog, public
from tests.helpers import ROOT


def front_matter() -> dict:
    text = (ROOT / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def pins(name: str) -> dict[str, str]:
    """Package name -> pinned version in a requirements file (comments and option lines skipped)."""
    found = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            found[requirement.name.lower()] = spec.version
    return found


def test_the_spaces_gradio_is_the_pinned_gradio():
    # the Space installs gradio==sdk_version next to requirements.txt: two different versions cannot resolve
    assert str(front_matter()["sdk_version"]) == pins("requirements.txt")["gradio"]


def test_the_front_matter_has_what_a_space_owner_expects():
    config = front_matter()
    assert config["sdk"] == "gradio" and config["app_file"] == "app.py"
    assert 0 < len(config["short_description"]) <= 60  # the hub's limit
    assert config["suggested_hardware"] == "cpu-basic"
    assert config["license"] == "apache-2.0" and (ROOT / "LICENSE").read_text().strip().startswith("Apache License")
    # every model the Space may download is declared, and what it preloads is among them
    assert config["models"] == list(catalog.allowed_hub_models())
    preloaded = [entry.split()[0] for entry in config["preload_from_hub"]]
    assert preloaded == list(catalog.bundled_sources()) and set(preloaded) <= set(config["models"])


def test_the_space_gets_the_cpu_build_of_the_pinned_torch():
    cpu = pins("pre-requirements.txt")["torch"]
    assert cpu == f"{pins('requirements.txt')['torch']}+cpu"  # torch==2.13.0 is then already met
    options = [line for line in (ROOT / "pre-requirements.txt").read_text().splitlines() if line.startswith("-")]
    assert options == ["--extra-index-url https://download.pytorch.org/whl/cpu"]
    # the index line stays out of what setup.sh and `pip install .` read (unreachable here: minutes of retries)
    for name in ("requirements.txt", "requirements-models.txt", "requirements-dev.txt"):
        assert "download.pytorch.org" not in (ROOT / name).read_text()


def test_the_default_allow_list_is_small_instruct_models():
    assert all("Instruct" in m or m.startswith("Qwen/Qwen3-") for m in public.EXTRA_ALLOWED)


@pytest.mark.subprocess
def test_the_wheel_has_the_console_script_the_pins_and_the_extras(tmp_path):
    """Built from a copy of the sources (the build writes egg-info next to them), without build isolation so
    nothing is downloaded: the venv's setuptools is the backend pyproject.toml names."""
    for name in ("pyproject.toml", "README.md", "LICENSE", "requirements.txt", "requirements-dev.txt",
                 "requirements-models.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "playground", tmp_path / "playground", ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("decoding_playground-0.1.0-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(info).decode()
        entry_points = archive.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "playground = playground.__main__:main" in entry_points
    assert "playground/ui/warmup.py" in names and "playground/host.py" in names
    # the context command's default text ships with its licence beside it
    assert {"playground/data/texts/hamlet.txt", "playground/data/texts/hamlet.LICENSE"} <= set(names)
    assert not any(n.startswith("tests/") for n in names)
    for name, version in pins("requirements.txt").items():
        assert any(line.lower().startswith(f"requires-dist: {name}=={version}") for line in metadata.splitlines())
    assert "Provides-Extra: dev" in metadata and "Provides-Extra: models" in metadata
    assert "License-Expression: Apache-2.0" in metadata

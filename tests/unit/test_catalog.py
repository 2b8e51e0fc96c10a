"""Model names resolve to the right source, and unsafe or unreachable ones are refused without hanging."""

import json
import threading
import time

import pytest

from playground.errors import PlaygroundError
from playground.models import catalog, convert, loaded


def test_names_resolve_to_their_kind():
    assert catalog.describe("smollm2-135m") == "bundled"
    assert catalog.describe("gemma3-270m") == "bundled"
    assert catalog.describe("HuggingFaceTB/SmolLM2-135M") == "hub"


@pytest.mark.parametrize("name", ["../../etc", "/etc", "~/", "./x"])
def test_paths_outside_the_roots_are_refused(name):
    with pytest.raises(PlaygroundError, match="outside the allowed roots"):
        catalog.describe(name)


@pytest.mark.parametrize("name", ["not a model!", "a/b/c", "org/..", "-x/y"])
def test_unknown_names_are_refused(name):
    with pytest.raises(PlaygroundError):
        catalog.describe(name)


def test_hub_id_fails_fast_when_the_hub_is_unreachable(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PlaygroundError, match="cannot reach the Hugging Face hub to fetch 'org/name'"):
        loaded.ModelLRU(1).get("org/name")


def test_a_conversion_without_its_marker_or_with_a_short_file_is_not_complete(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x" * 100)
    assert not convert.is_complete(folder)
    (folder / convert.COMPLETE_MARKER).write_text(json.dumps({"sizes": {"model.safetensors": 100}}))
    assert convert.is_complete(folder)
    (folder / "model.safetensors").write_bytes(b"x" * 50)  # truncated by a killed writer
    assert not convert.is_complete(folder)


def test_two_processes_converting_the_same_model_convert_it_once(tmp_path, monkeypatch):
    """The second caller waits on the lock and finds the first one's result; it never deletes it mid-load."""
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    converted = []

    def slow_convert(target, gguf, progress):
        time.sleep(0.3)
        target.mkdir(parents=True)
        (target / "model.safetensors").write_bytes(b"x" * 10)
        (target / convert.COMPLETE_MARKER).write_text(json.dumps({"sizes": {"model.safetensors": 10}}))
        converted.append(target)

    monkeypatch.setattr(convert, "_convert", slow_convert)
    results = []
    workers = [threading.Thread(target=lambda: results.append(
        convert.convert_gguf("m", lambda progress: tmp_path / "m.gguf", convert.no_progress))) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(converted) == 1
    assert results == [tmp_path / "models" / "m"] * 2


def test_catalog_lists_the_bundled_models():
    names = [row["name"] for row in catalog.list_models()]
    assert names == ["smollm2-135m", "gemma3-270m"]

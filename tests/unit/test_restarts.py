"""Hosting that restarts at will: caches on a persistent volume, an optional warm-up, exports that do not pile up."""

import os
import threading
import time

import pytest

from playground.events import ProgressEvent
from playground.models import paths
from playground.ui import export, warmup
from playground.ui.live import LIVE_RUNS, WarmUpState


@pytest.fixture
def volume(tmp_path, monkeypatch):
    """A fake persistent volume: a folder the code is told is mounted."""
    monkeypatch.delenv("PLAYGROUND_CACHE", raising=False)
    monkeypatch.setattr(paths, "PERSISTENT_VOLUMES", (tmp_path,))
    monkeypatch.setattr(os.path, "ismount", lambda path: path == tmp_path)
    return tmp_path


def test_the_cache_goes_to_a_mounted_persistent_volume(volume):
    assert paths.cache_root() == volume / "playground"
    assert paths.converted_dir() == volume / "playground" / "models"


def test_an_explicit_cache_wins_over_the_volume(volume, monkeypatch, tmp_path_factory):
    chosen = tmp_path_factory.mktemp("chosen")
    monkeypatch.setenv("PLAYGROUND_CACHE", str(chosen))
    assert paths.cache_root() == chosen


def test_without_a_mounted_writable_volume_the_user_cache_is_used(tmp_path, monkeypatch):
    monkeypatch.delenv("PLAYGROUND_CACHE", raising=False)
    monkeypatch.setattr(paths, "PERSISTENT_VOLUMES", (tmp_path,))  # a plain folder, not a mount
    assert paths.cache_root() == paths.Path.home() / ".cache" / "playground"
    monkeypatch.setattr(os.path, "ismount", lambda path: True)
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # mounted read-only
    assert paths.cache_root() == paths.Path.home() / ".cache" / "playground"


def test_old_exports_are_deleted_when_a_new_one_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "export_root", lambda: tmp_path)
    old, recent = tmp_path / "export-old", tmp_path / "export-recent"
    for folder, age in ((old, export.EXPORT_MAX_AGE_S + 60), (recent, 60)):
        folder.mkdir()
        (folder / "decoding-playground-results.json").write_text("{}")
        os.utime(folder, (time.time() - age, time.time() - age))
    json_path, csv_path = export.write_exports({"columns": []}, [], [])
    assert json_path.exists() and csv_path.exists() and json_path.parent.parent == tmp_path
    assert not old.exists() and recent.exists()


@pytest.fixture
def fresh_warmup(monkeypatch):
    monkeypatch.setattr(LIVE_RUNS, "warmup", WarmUpState())
    for name in ("PLAYGROUND_WARMUP", "SPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(("warm", "space_id", "expected"), [
    (None, None, False), (None, "a/b", True), ("1", None, True), ("0", "a/b", False)])
def test_warm_up_is_opt_in_except_on_a_space(fresh_warmup, warm, space_id, expected):
    for name, value in (("PLAYGROUND_WARMUP", warm), ("SPACE_ID", space_id)):
        if value is not None:
            fresh_warmup.setenv(name, value)
    assert warmup.enabled() is expected
    if not expected:
        assert warmup.start() is None and warmup.status()["phase"] == "off"


def test_the_page_says_so_while_the_warm_up_runs(fresh_warmup):
    release, seen = threading.Event(), []

    def fake_run(prompt, spec):
        seen.append((prompt, spec.backend, spec.strategy))
        yield ProgressEvent(0.5, "loading smollm2-135m (fp32)")
        release.wait(10)
        yield ProgressEvent(1.0, "smollm2-135m ready")

    fresh_warmup.setattr(warmup.runner, "run", fake_run)
    fresh_warmup.setenv("PLAYGROUND_WARMUP", "1")
    thread = warmup.start()
    deadline = time.monotonic() + 5
    while "loading" not in warmup.notice() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "Warming up** (loading smollm2-135m (fp32))" in warmup.notice()
    assert warmup.start() is None  # once
    release.set()
    thread.join(5)
    assert warmup.notice() == "" and warmup.status()["phase"] == "done"
    assert seen == [(warmup.DEFAULT_PROMPT, "jax", "greedy")] * len(warmup.WARMUP_SPECS)


def test_a_failed_warm_up_is_reported_and_the_page_carries_on(fresh_warmup):
    def failing(prompt, spec):
        raise RuntimeError("no model here")
        yield

    fresh_warmup.setattr(warmup.runner, "run", failing)
    fresh_warmup.setenv("PLAYGROUND_WARMUP", "1")
    warmup.start().join(5)
    assert warmup.status() == {"phase": "failed", "detail": "no model here", "seconds": LIVE_RUNS.warmup.seconds}
    assert warmup.notice() == ""


def test_the_page_has_the_warm_up_notice_and_its_status_endpoint():
    from playground.ui.wiring import build_ui

    config = build_ui()[0].config
    assert "warmup" in [c.get("props", {}).get("elem_id") for c in config["components"]]
    assert "warmup" in [d.get("api_name") for d in config["dependencies"]]

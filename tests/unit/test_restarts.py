"""Hosting that restarts at will: caches on a persistent volume, an optional warm-up, exports that do not pile up."""

import os
import threading
import time

import pytest

from playground import generation_slot
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
    written = export.write_exports({"columns": []}, [], [])
    assert all(path.exists() for path in written) and written.json.parent.parent == tmp_path
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


def test_the_page_shows_the_warm_ups_progress_request_by_request(fresh_warmup):
    release, seen = threading.Event(), []

    def fake_run(prompt, spec):
        seen.append((prompt, spec.backend, spec.cache))
        yield ProgressEvent(0.5, "loading smollm2-135m (fp32)")
        release.wait(10)
        yield ProgressEvent(1.0, "smollm2-135m ready")

    fresh_warmup.setattr(warmup.runner, "run", fake_run)
    fresh_warmup.setenv("PLAYGROUND_WARMUP", "default")
    thread = warmup.start()
    deadline = time.monotonic() + 5
    while "loading" not in warmup.notice() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "Warming up** 1 of 2 (default column · jax · dynamic: loading smollm2-135m)" in warmup.notice()
    assert warmup.start() is None  # once
    release.set()
    thread.join(5)
    assert warmup.notice() == "" and warmup.status()["phase"] == "done" and warmup.status()["done"] == 2
    assert seen == [(warmup.DEFAULT_PROMPT, "jax", "dynamic"), (warmup.DEFAULT_PROMPT, "jax", "static")]


def test_a_warm_up_covers_every_presets_jax_columns_once():
    from playground.spec import RunSpec
    from playground.ui.chat import MODES
    from playground.ui.presets import PRESETS

    planned = warmup.planned("presets")
    keys = [(r.prompt, r.spec) for r in planned]
    assert len(keys) == len(set(keys))  # each prompt and spec once
    for name, preset in PRESETS.items():
        for column in preset.columns:
            if column["backend"] == "jax":  # what the page runs after the preset's click
                assert (preset.prompt, RunSpec.from_dict({**column, "chat": MODES[preset.mode]})) in keys, name
    assert all(r.spec.backend == "jax" for r in planned)
    assert [r.label for r in warmup.planned("default")] == ["default column · jax · dynamic",
                                                            "default column · jax · static"]


@pytest.mark.parametrize(("value", "expected"), [("1", "presets"), ("default", "default"), ("0", ""), ("no", "")])
def test_the_warm_up_scope_comes_from_the_environment(fresh_warmup, value, expected):
    fresh_warmup.setenv("PLAYGROUND_WARMUP", value)
    assert warmup.scope() == expected


def test_a_run_waiting_for_the_slot_goes_before_the_warm_ups_next_request(fresh_warmup):
    """The warm-up's first request holds the slot; a visitor's run waits for it; the warm-up's second request
    starts only after the visitor's run has finished."""
    from playground import runner

    order, visitor_waiting, first_started = [], threading.Event(), threading.Event()

    def fake_run(prompt, spec):
        first_started.set()
        with runner.GENERATION_LOCK:
            order.append(f"warm-up {spec.cache} starts")
            visitor_waiting.wait(5)
            time.sleep(0.05)
            order.append(f"warm-up {spec.cache} ends")
        yield ProgressEvent(1.0, "done")

    def visitor():
        first_started.wait(5)
        time.sleep(0.05)
        threading.Timer(0.05, visitor_waiting.set).start()  # set once the visitor is blocked on the slot
        with runner.GENERATION_LOCK:
            order.append("visitor runs")
            time.sleep(0.1)

    fresh_warmup.setattr(warmup.runner, "run", fake_run)
    fresh_warmup.setattr(generation_slot, "QUIET_S", 0.2)
    fresh_warmup.setenv("PLAYGROUND_WARMUP", "default")
    guest = threading.Thread(target=visitor)
    guest.start()
    warmup.start().join(10)
    guest.join(5)
    assert order == ["warm-up dynamic starts", "warm-up dynamic ends", "visitor runs", "warm-up static starts",
                     "warm-up static ends"]


def test_a_failed_warm_up_is_reported_and_the_page_carries_on(fresh_warmup):
    def failing(prompt, spec):
        raise RuntimeError("no model here")
        yield

    fresh_warmup.setattr(warmup.runner, "run", failing)
    fresh_warmup.setenv("PLAYGROUND_WARMUP", "default")
    warmup.start().join(5)
    assert warmup.status() == {"phase": "failed", "detail": "no model here", "seconds": LIVE_RUNS.warmup.seconds,
                               "done": 0, "total": 2}
    assert warmup.notice() == ""


def test_the_page_has_the_warm_up_notice_and_its_status_endpoint():
    from playground.ui.wiring import build_ui

    config = build_ui()[0].config
    assert "warmup" in [c.get("props", {}).get("elem_id") for c in config["components"]]
    assert "warmup" in [d.get("api_name") for d in config["dependencies"]]

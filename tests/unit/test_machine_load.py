"""A timing taken while other work held the CPUs says so: measured from /proc/stat, shown on the card and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from playground import metrics
from playground.metrics import CpuSample, busy_note, machine_load, read_stat

TICK = 1.0 / os.sysconf("SC_CLK_TCK")


def test_proc_stat_is_read_as_busy_and_stolen_seconds_over_every_cpu(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 20 30 5000 7 1 2 40 0 0\ncpu0 50 10 15 2500 3 0 1 20 0 0\n"
                    "cpu1 50 10 15 2500 4 1 1 20 0 0\nintr 1 2 3\n")
    busy, steal, cpus = read_stat(stat)
    assert busy == pytest.approx((100 + 20 + 30 + 1 + 2) * TICK) and steal == pytest.approx(40 * TICK)
    assert cpus == 2
    assert read_stat(tmp_path / "missing") is None  # not Linux: nothing is claimed


def test_other_work_above_a_quarter_of_the_machine_marks_the_run_busy():
    start = CpuSample(wall_s=0.0, busy_s=0.0, steal_s=0.0, own_s=0.0, cpus=2)
    quiet = machine_load(start, CpuSample(wall_s=10.0, busy_s=19.0, steal_s=0.0, own_s=18.5, cpus=2))
    assert quiet == {"other_cpu_share": 0.025, "steal_share": 0.0, "cpus": 2, "busy": False}
    assert busy_note(quiet) == ""
    busy = machine_load(start, CpuSample(wall_s=10.0, busy_s=20.0, steal_s=2.0, own_s=12.0, cpus=2))
    assert busy == {"other_cpu_share": 0.4, "steal_share": 0.1, "cpus": 2, "busy": True}
    assert "other work took 50% of the 2 CPUs" in busy_note(busy)
    assert machine_load(None, start) is None


def test_a_compile_left_running_is_named_with_its_overlap_however_short():
    """A tiny model's run takes milliseconds: an overlap that short is said in ms, not rounded to '0.0 s'."""
    quiet = {"other_cpu_share": 0.0, "steal_share": 0.0, "cpus": 2}
    left = "a JAX compile that a stopped run left running shared the CPUs for"
    assert f"{left} 4.2 ms," in busy_note(quiet | {"left_running_s": 0.0042, "busy": True})
    assert f"{left} 1.3 s," in busy_note(quiet | {"left_running_s": 1.26, "busy": True})


def test_processes_burning_every_cpu_during_a_run_are_seen():
    before = metrics.cpu_sample()
    if before is None:
        pytest.skip("no /proc/stat here")
    burn = "import time\nend = time.time() + 0.5\nwhile time.time() < end: pass"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(before.cpus)]
    for burner in burners:
        burner.wait()
    time.sleep(0.05)
    load = machine_load(before, metrics.cpu_sample())
    assert load is not None and load["busy"], load  # this process only waited: all of it was other work


def test_the_card_and_repeated_runs_carry_the_busiest_runs_load():
    from playground.result import combine_runs
    from playground.ui.run import done_notice
    from tests.unit.page_fakes import fake_result

    quiet, busy = fake_result([1, 2]), fake_result([1, 2])
    quiet["extra"] = {"machine_load": {"other_cpu_share": 0.01, "steal_share": 0.0, "cpus": 2, "busy": False}}
    busy["extra"] = {"machine_load": {"other_cpu_share": 0.6, "steal_share": 0.0, "cpus": 2, "busy": True}}
    assert "busy machine" not in done_notice(quiet)
    assert "⚠ busy machine: other work took 60% of the 2 CPUs" in done_notice(combine_runs([quiet, busy]))

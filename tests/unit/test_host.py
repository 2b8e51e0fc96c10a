"""Limits that see the container: cgroup v2 / v1 memory and CPU limits, affinity and RAM, on faked cgroup trees."""

import os

import psutil
import pytest

from playground import host
from playground.models import memory
from tests.helpers import run_module

GIB = 2**30


def v2_tree(root, memory_max="max", cpu_max="max 100000", nested: dict[str, str] | None = None):
    """A cgroup v2 mount: the unified tree, with the process's own cgroup at /app/worker."""
    (root / "cgroup.controllers").write_text("cpu memory pids")
    own = root / "app" / "worker"
    own.mkdir(parents=True)
    (root / "app" / "memory.max").write_text(memory_max)
    (root / "app" / "cpu.max").write_text(cpu_max)
    for name, value in (nested or {}).items():
        (own / name).write_text(value)
    return {"": "/app/worker"}


def v1_tree(root, limit: int, quota: int, period: int = 100000):
    """A cgroup v1 mount as Docker shows it without a cgroup namespace: the container's own folders at the
    controller roots, while /proc/self/cgroup names a host path that does not exist in here."""
    (root / "memory").mkdir()
    (root / "memory" / "memory.limit_in_bytes").write_text(str(limit))
    (root / "cpu,cpuacct").mkdir()
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text(str(quota))
    (root / "cpu,cpuacct" / "cpu.cfs_period_us").write_text(str(period))
    return {"memory": "/docker/abc", "cpu": "/docker/abc", "cpuacct": "/docker/abc"}


def test_v2_limits_on_an_ancestor_apply(tmp_path):
    own = v2_tree(tmp_path, memory_max=str(16 * GIB), cpu_max="200000 100000")
    assert host.memory_limit(tmp_path, own) == 16 * GIB
    assert host.cpu_limit(tmp_path, own) == 2.0


def test_v2_the_smallest_limit_on_the_way_up_wins(tmp_path):
    own = v2_tree(tmp_path, memory_max=str(16 * GIB), cpu_max="400000 100000",
                  nested={"memory.max": str(3 * GIB), "cpu.max": "150000 100000"})
    assert host.memory_limit(tmp_path, own) == 3 * GIB
    assert host.cpu_limit(tmp_path, own) == 1.5


def test_v2_max_means_no_limit(tmp_path):
    own = v2_tree(tmp_path)
    assert host.memory_limit(tmp_path, own) is None
    assert host.cpu_limit(tmp_path, own) is None


def test_v2_with_a_cgroup_namespace_reads_the_root(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory")
    (tmp_path / "memory.max").write_text(str(2 * GIB))
    (tmp_path / "cpu.max").write_text("100000 100000")
    assert host.memory_limit(tmp_path, {"": "/"}) == 2 * GIB
    assert host.cpu_limit(tmp_path, {"": "/"}) == 1.0


def test_v1_limits_when_the_recorded_path_is_not_mounted(tmp_path):
    own = v1_tree(tmp_path, limit=12 * GIB, quota=300000)
    assert host.memory_limit(tmp_path, own) == 12 * GIB
    assert host.cpu_limit(tmp_path, own) == 3.0


def test_v1_unlimited_values_are_no_limit(tmp_path):
    own = v1_tree(tmp_path, limit=9223372036854771712, quota=-1)
    assert host.memory_limit(tmp_path, own) is None
    assert host.cpu_limit(tmp_path, own) is None


def test_detect_takes_the_smallest_of_cgroup_affinity_and_ram(tmp_path, monkeypatch):
    own = v2_tree(tmp_path, memory_max=str(GIB), cpu_max="50000 100000")  # half a CPU
    monkeypatch.setattr(host, "affinity_cpus", lambda: 64)
    limits = host.detect(tmp_path, own)
    assert (limits.memory_bytes, limits.memory_source) == (GIB, "cgroup")
    assert (limits.cpus, limits.cpu_source) == (1, "cgroup")  # at least one thread


def test_detect_without_limits_falls_back_to_ram_and_affinity(tmp_path, monkeypatch):
    own = v2_tree(tmp_path, memory_max=str(2**50))  # above the machine's RAM
    monkeypatch.setattr(host, "affinity_cpus", lambda: 1)
    limits = host.detect(tmp_path, own)
    assert (limits.memory_bytes, limits.memory_source) == (psutil.virtual_memory().total, "physical RAM")
    assert (limits.cpus, limits.cpu_source) == (1, "affinity")


def test_the_default_budget_is_a_share_of_the_container_limit(tmp_path, monkeypatch):
    (tmp_path / "cgroup.controllers").write_text("memory")
    (tmp_path / "memory.max").write_text(str(10 * GIB))
    monkeypatch.setenv("PLAYGROUND_CGROUP_ROOT", str(tmp_path))
    monkeypatch.setattr(host, "own_cgroups", lambda: {"": "/"})
    monkeypatch.delenv("PLAYGROUND_MEMORY_BUDGET", raising=False)
    host.limits.cache_clear()
    try:
        assert memory.budget_bytes() == int(10 * GIB * memory.DEFAULT_BUDGET_SHARE)
    finally:
        host.limits.cache_clear()


def test_thread_variables_are_set_but_never_overridden(monkeypatch):
    for name in host.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "7")
    assert host.apply_thread_limits(cpus=3) == 3
    assert [os.environ[n] for n in host.THREAD_VARIABLES] == ["3", "7", "3", "3"]


@pytest.mark.subprocess
@pytest.mark.parametrize("cpu_max", ["100000 100000", "200000 100000"])
def test_torch_and_xla_start_with_the_cgroup_cpu_count(tmp_path, cpu_max):
    """In a fresh process, as app.py and the CLI do it: limits first, then torch and jax start their pools."""
    (tmp_path / "cgroup.controllers").write_text("cpu")
    (tmp_path / "cpu.max").write_text(cpu_max)
    env = {k: v for k, v in os.environ.items() if k not in host.THREAD_VARIABLES}
    out = run_module("thread_counts", env={**env, "PLAYGROUND_CGROUP_ROOT": str(tmp_path)}, timeout=120)
    assert out.returncode == 0, out.stderr
    expected = min(int(cpu_max.split()[0]) // 100000, host.affinity_cpus() or 1)
    assert out.stdout.split() == [str(expected), str(expected)]

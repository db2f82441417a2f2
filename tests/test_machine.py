"""The machine as the job sees it, against fake cgroup v2 and v1 trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loadertop.core.machine.facts import (
    MB,
    cgroup_memory_headroom_mb,
    cpu_quota,
    machine_info,
    mem_available_mb,
    shm_free_mb,
    torch_version,
    usable_cpus,
)
from loadertop.core.machine.gpu import GpuProbe
from loadertop.core.model.results import MachineInfo

V1_UNLIMITED = "9223372036854771712"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    """A /proc/self/cgroup that puts us at the root of every hierarchy (as in a container)."""
    path = tmp_path / "proc_self_cgroup"
    path.write_text("0::/\n")
    return path


def v2_tree(root: Path, cpu_max: str | None = None, mem_max: str | None = None, mem_current: int = 0) -> Path:
    write(root / "cgroup.controllers", "cpuset cpu io memory pids")
    if cpu_max is not None:
        write(root / "cpu.max", cpu_max)
    if mem_max is not None:
        write(root / "memory.max", mem_max)
        write(root / "memory.current", str(mem_current))
    return root


def v1_tree(root: Path, quota: int = -1, period: int = 100_000, limit: str = V1_UNLIMITED, usage: int = 0) -> Path:
    write(root / "cpu,cpuacct" / "cpu.cfs_quota_us", str(quota))
    write(root / "cpu,cpuacct" / "cpu.cfs_period_us", str(period))
    (root / "cpu").mkdir()
    write(root / "cpu" / "cpu.cfs_quota_us", str(quota))
    write(root / "cpu" / "cpu.cfs_period_us", str(period))
    write(root / "memory" / "memory.limit_in_bytes", limit)
    write(root / "memory" / "memory.usage_in_bytes", str(usage))
    return root


@pytest.fixture
def eight_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)


# -- CPU -----------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_v2_quota_rounds_up_and_caps_affinity(tmp_path: Path, proc_root: Path, eight_cpus: None) -> None:
    root = v2_tree(tmp_path / "cg", cpu_max="150000 100000")
    assert cpu_quota(root, proc_root) == pytest.approx(1.5)
    assert usable_cpus(root, proc_root) == 2


@pytest.mark.unit
def test_v2_quota_above_affinity_leaves_affinity(
    tmp_path: Path, proc_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    root = v2_tree(tmp_path / "cg", cpu_max="400000 100000")
    assert cpu_quota(root, proc_root) == pytest.approx(4.0)
    assert usable_cpus(root, proc_root) == 1


@pytest.mark.unit
def test_v2_max_is_unlimited(tmp_path: Path, proc_root: Path, eight_cpus: None) -> None:
    root = v2_tree(tmp_path / "cg", cpu_max="max 100000")
    assert cpu_quota(root, proc_root) is None
    assert usable_cpus(root, proc_root) == 8


@pytest.mark.unit
def test_tiny_quota_still_gives_one_cpu(tmp_path: Path, proc_root: Path, eight_cpus: None) -> None:
    root = v2_tree(tmp_path / "cg", cpu_max="10000 100000")
    assert cpu_quota(root, proc_root) == pytest.approx(0.1)
    assert usable_cpus(root, proc_root) == 1


@pytest.mark.unit
def test_v1_quota(tmp_path: Path, proc_root: Path, eight_cpus: None) -> None:
    root = v1_tree(tmp_path / "cg", quota=250_000, period=100_000)
    assert cpu_quota(root, proc_root) == pytest.approx(2.5)
    assert usable_cpus(root, proc_root) == 3


@pytest.mark.unit
def test_v1_unlimited(tmp_path: Path, proc_root: Path, eight_cpus: None) -> None:
    root = v1_tree(tmp_path / "cg", quota=-1)
    assert cpu_quota(root, proc_root) is None
    assert usable_cpus(root, proc_root) == 8


@pytest.mark.unit
def test_missing_or_garbage_cgroup_files(tmp_path: Path, proc_root: Path, eight_cpus: None) -> None:
    assert cpu_quota(tmp_path / "nothing", proc_root) is None
    assert usable_cpus(tmp_path / "nothing", proc_root) == 8
    root = v2_tree(tmp_path / "cg", cpu_max="lots please")
    assert cpu_quota(root, proc_root) is None
    assert cgroup_memory_headroom_mb(tmp_path / "nothing", proc_root) is None


@pytest.mark.unit
def test_nested_cgroup_takes_tightest_ancestor(tmp_path: Path, eight_cpus: None) -> None:
    """Without a cgroup namespace (SLURM, systemd) our limits live in our own cgroup or any ancestor."""
    root = v2_tree(tmp_path / "cg", cpu_max="max 100000")
    write(root / "job" / "cpu.max", "300000 100000")
    write(root / "job" / "memory.max", str(1024 * MB))
    write(root / "job" / "memory.current", str(1000 * MB))
    write(root / "job" / "step" / "cpu.max", "max 100000")
    write(root / "job" / "step" / "memory.max", str(4096 * MB))
    write(root / "job" / "step" / "memory.current", str(100 * MB))
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/job/step\n")
    assert cpu_quota(root, proc) == pytest.approx(3.0)
    assert usable_cpus(root, proc) == 3
    assert cgroup_memory_headroom_mb(root, proc) == pytest.approx(24.0)


@pytest.mark.unit
def test_own_cgroup_missing_falls_back_to_root(tmp_path: Path) -> None:
    root = v2_tree(tmp_path / "cg", cpu_max="200000 100000")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/not/here\n")
    assert cpu_quota(root, proc) == pytest.approx(2.0)


# -- memory --------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_v2_memory_headroom(tmp_path: Path, proc_root: Path) -> None:
    root = v2_tree(tmp_path / "cg", mem_max=str(8192 * MB), mem_current=3072 * MB)
    assert cgroup_memory_headroom_mb(root, proc_root) == pytest.approx(5120.0)


@pytest.mark.unit
def test_v2_memory_unlimited(tmp_path: Path, proc_root: Path) -> None:
    root = v2_tree(tmp_path / "cg", mem_max="max", mem_current=3072 * MB)
    assert cgroup_memory_headroom_mb(root, proc_root) is None


@pytest.mark.unit
def test_memory_over_limit_clamps_to_zero(tmp_path: Path, proc_root: Path) -> None:
    root = v2_tree(tmp_path / "cg", mem_max=str(100 * MB), mem_current=101 * MB)
    assert cgroup_memory_headroom_mb(root, proc_root) == 0.0


@pytest.mark.unit
def test_v1_memory_headroom(tmp_path: Path, proc_root: Path) -> None:
    root = v1_tree(tmp_path / "cg", limit=str(2048 * MB), usage=512 * MB)
    assert cgroup_memory_headroom_mb(root, proc_root) == pytest.approx(1536.0)


@pytest.mark.unit
def test_v1_memory_absurd_limit_is_unlimited(tmp_path: Path, proc_root: Path) -> None:
    root = v1_tree(tmp_path / "cg", limit=V1_UNLIMITED, usage=512 * MB)
    assert cgroup_memory_headroom_mb(root, proc_root) is None


@pytest.mark.unit
def test_v1_nested_memory_cgroup(tmp_path: Path) -> None:
    root = v1_tree(tmp_path / "cg")
    write(root / "memory" / "box" / "memory.limit_in_bytes", str(1024 * MB))
    write(root / "memory" / "box" / "memory.usage_in_bytes", str(24 * MB))
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("4:memory:/box\n1:cpu,cpuacct:/\n0::/\n")
    assert cgroup_memory_headroom_mb(root, proc) == pytest.approx(1000.0)


@pytest.mark.unit
def test_shm_and_mem_available(tmp_path: Path) -> None:
    free = shm_free_mb(tmp_path)
    assert free is not None and free > 0
    assert shm_free_mb(tmp_path / "absent") is None
    assert mem_available_mb() > 0


# -- machine_info ---------------------------------------------------------------------------------------------


def test_machine_info_fills_every_field(tmp_path: Path, proc_root: Path, eight_cpus: None) -> None:
    root = v2_tree(tmp_path / "cg", cpu_max="150000 100000", mem_max=str(4096 * MB), mem_current=1024 * MB)
    gpu = GpuProbe(nvml=None)  # the real pynvml: unavailable without a GPU, never raises
    try:
        info = machine_info(gpu, cgroup_root=root, shm_path=tmp_path, proc_cgroup=proc_root)
    finally:
        gpu.close()
    assert isinstance(info, MachineInfo)
    assert info.hostname and info.platform and info.python.count(".") == 2
    assert info.logical_cpus == (os.cpu_count() or 1)
    assert info.usable_cpus == 2
    assert info.cpu_quota == pytest.approx(1.5)
    assert info.mem_total_mb >= info.mem_available_mb > 0
    assert info.cgroup_mem_headroom_mb == pytest.approx(3072.0)
    assert info.shm_free_mb is not None and info.shm_free_mb > 0
    assert info.default_start_method in ("fork", "spawn", "forkserver")
    assert info.gpus == gpu.devices()
    assert (info.gpu_unavailable is None) == bool(info.gpus)
    assert info.summary()


@pytest.mark.unit
def test_torch_version_without_importing_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    had_torch = "torch" in sys.modules
    torch_version()
    assert ("torch" in sys.modules) == had_torch

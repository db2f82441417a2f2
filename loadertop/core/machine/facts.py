"""The machine as the job sees it: CPU affinity, cgroup (v2 and v1) limits, memory, /dev/shm.

Every reader takes the root or path it reads from, so tests can point it at a fake tree under tmp_path.
Nothing here raises on a missing or unreadable file: an unknown limit is None ("no limit we can see").
MB means MiB (2**20 bytes) throughout loadertop.
"""

from __future__ import annotations

import importlib.metadata
import math
import multiprocessing
import os
import platform
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from loadertop.core.model.figures import MB
from loadertop.core.model.results import MachineInfo

if TYPE_CHECKING:
    from loadertop.core.machine.gpu import GpuProbe

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
# LOADERTOP_SHM_PATH: another tmpfs in its place (a test's small one; a job whose shared memory lives elsewhere)
SHM_PATH = Path(os.environ.get("LOADERTOP_SHM_PATH") or "/dev/shm")
# cgroup v1 reports "no limit" as a huge page-aligned number (9223372036854771712 on x86-64).
_V1_UNLIMITED_BYTES = 1 << 60


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _own_paths(proc_cgroup: Path) -> dict[str, str]:
    """Map controller ("" for the v2 unified hierarchy) to this process's cgroup path, from /proc/self/cgroup."""
    text = _read(proc_cgroup)
    paths: dict[str, str] = {}
    if not text:
        return paths
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller.removeprefix("name=")] = path
    return paths


def _chain(base: Path, own: str | None) -> list[Path]:
    """The cgroup directories whose limits apply: our own cgroup and its ancestors up to `base`.

    In a container with a cgroup namespace our own path is "/", i.e. `base` itself. Without one (SLURM,
    systemd slices) the limit may sit in a nested directory, and any ancestor may hold a tighter one.
    When our own path does not exist under `base` (a fake tree, another mount), only `base` is used.
    """
    if own:
        rel = own.strip("/")
        if rel and ".." not in rel.split("/"):
            leaf = base / rel
            if leaf.is_dir():
                dirs = [leaf]
                while dirs[-1] != base and base in dirs[-1].parents:
                    dirs.append(dirs[-1].parent)
                return dirs
    return [base]


def _v1_dir(cgroup_root: Path, controller: str) -> Path | None:
    for name in (controller, f"{controller},cpuacct", f"cpuacct,{controller}"):
        candidate = cgroup_root / name
        if candidate.is_dir():
            return candidate
    return None


def _quota_v2(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")
    if not text:
        return None
    fields = text.split()
    if fields[0] == "max":
        return None
    try:
        quota = int(fields[0])
        period = int(fields[1]) if len(fields) > 1 else 100_000
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(directory: Path) -> float | None:
    quota = _read_int(directory / "cpu.cfs_quota_us")
    period = _read_int(directory / "cpu.cfs_period_us")
    if quota is None or period is None or quota <= 0 or period <= 0:
        return None
    return quota / period


def _tightest(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def cpu_quota(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_SELF_CGROUP) -> float | None:
    """The cgroup CPU quota in CPUs (cpu.max quota/period, or v1 cfs_quota_us/cfs_period_us).

    None when unlimited ("max", -1) or unreadable. The tightest limit along our cgroup's ancestry wins.
    """
    own = _own_paths(proc_cgroup)
    if (cgroup_root / "cgroup.controllers").exists():  # v2 (unified) at the root
        return _tightest([_quota_v2(d) for d in _chain(cgroup_root, own.get(""))])
    v1 = _v1_dir(cgroup_root, "cpu")
    if v1 is not None:
        return _tightest([_quota_v1(d) for d in _chain(v1, own.get("cpu"))])
    return None


def usable_cpus(
    cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_SELF_CGROUP, environ: Mapping[str, str] | None = None
) -> int:
    """CPUs this process may run on (affinity), capped by the cgroup quota (rounded up) and by SLURM_CPUS_PER_TASK
    (a SLURM task may see the whole node's affinity where the job asked for fewer); at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    quota = cpu_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    per_task = (os.environ if environ is None else environ).get("SLURM_CPUS_PER_TASK", "")
    if per_task.strip().isdigit() and int(per_task) > 0:
        cpus = min(cpus, int(per_task))
    return max(1, cpus)


def _headroom_v2(directory: Path) -> float | None:
    limit = _read(directory / "memory.max")
    current = _read_int(directory / "memory.current")
    if limit is None or limit == "max" or current is None:
        return None
    try:
        return (int(limit) - current) / MB
    except ValueError:
        return None


def _headroom_v1(directory: Path) -> float | None:
    limit = _read_int(directory / "memory.limit_in_bytes")
    usage = _read_int(directory / "memory.usage_in_bytes")
    if limit is None or usage is None or limit >= _V1_UNLIMITED_BYTES:
        return None
    return (limit - usage) / MB


def cgroup_memory_headroom_mb(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_SELF_CGROUP) -> float | None:
    """Memory the cgroup still allows: memory.max - memory.current (v1: limit - usage), in MB.

    None when unlimited or unreadable; clamped at 0. Page cache counts towards usage (the kernel reclaims it
    under pressure), so this is a conservative figure. The tightest limit along our cgroup's ancestry wins.
    """
    own = _own_paths(proc_cgroup)
    if (cgroup_root / "cgroup.controllers").exists():
        headroom = _tightest([_headroom_v2(d) for d in _chain(cgroup_root, own.get(""))])
    else:
        v1 = _v1_dir(cgroup_root, "memory")
        if v1 is None:
            return None
        headroom = _tightest([_headroom_v1(d) for d in _chain(v1, own.get("memory"))])
    return None if headroom is None else max(0.0, headroom)


def shm_free_mb(path: Path | str = SHM_PATH) -> float | None:
    """Free space in /dev/shm (where DataLoader workers put batches), in MB; None when absent."""
    try:
        return shutil.disk_usage(path).free / MB
    except OSError:
        return None


def mem_available_mb() -> float:
    """The system's MemAvailable, in MB."""
    return float(psutil.virtual_memory().available) / MB


def torch_version() -> str | None:
    """The installed torch version, read from package metadata (importing torch costs ~1.5 s)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info(
    gpu: GpuProbe,
    cgroup_root: Path = CGROUP_ROOT,
    shm_path: Path | str = SHM_PATH,
    proc_cgroup: Path = PROC_SELF_CGROUP,
) -> MachineInfo:
    """A snapshot of the machine as the job sees it. Never raises for a missing cgroup or GPU."""
    vm = psutil.virtual_memory()
    return MachineInfo(
        hostname=socket.gethostname(),
        platform=platform.platform(),
        python=platform.python_version(),
        torch=torch_version(),
        logical_cpus=os.cpu_count() or 1,
        usable_cpus=usable_cpus(cgroup_root, proc_cgroup),
        cpu_quota=cpu_quota(cgroup_root, proc_cgroup),
        mem_total_mb=float(vm.total) / MB,
        mem_available_mb=float(vm.available) / MB,
        cgroup_mem_headroom_mb=cgroup_memory_headroom_mb(cgroup_root, proc_cgroup),
        shm_free_mb=shm_free_mb(shm_path),
        default_start_method=multiprocessing.get_all_start_methods()[0],
        gpus=gpu.devices(),
        gpu_unavailable=gpu.unavailable,
    )

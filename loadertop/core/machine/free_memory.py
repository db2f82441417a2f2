"""Free memory as this job sees it: the system's MemAvailable, tightened by the cgroup's limit and headroom.

Read by the memory guard at 20 Hz, so the cheap ways are taken (MemAvailable alone from /proc/meminfo; the cgroup
files holding a limit found once). Memory figures are MiB ("MB" in names, as elsewhere in loadertop)."""

from __future__ import annotations

from pathlib import Path

import psutil

from loadertop.core.machine.facts import (
    _V1_UNLIMITED_BYTES,
    CGROUP_ROOT,
    PROC_SELF_CGROUP,
    _chain,
    _own_paths,
    _read,
    _read_int,
    _v1_dir,
    cgroup_memory_headroom_mb,
)
from loadertop.core.model.figures import MB


def cgroup_memory_limit_mb(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_SELF_CGROUP) -> float | None:
    """The tightest cgroup memory limit over our cgroup's ancestry (memory.max, v1 limit_in_bytes); None if none."""
    own = _own_paths(proc_cgroup)
    limits: list[int] = []
    if (cgroup_root / "cgroup.controllers").exists():
        for directory in _chain(cgroup_root, own.get("")):
            text = _read(directory / "memory.max")
            if text and text != "max" and text.isdigit():
                limits.append(int(text))
    else:
        v1 = _v1_dir(cgroup_root, "memory")
        for directory in _chain(v1, own.get("memory")) if v1 is not None else []:
            value = _read_int(directory / "memory.limit_in_bytes")
            if value is not None and value < _V1_UNLIMITED_BYTES:
                limits.append(value)
    return min(limits) / MB if limits else None


def read_mem_available_mb() -> float:
    """MemAvailable from /proc/meminfo (40 µs; psutil parses the whole file and takes 110 µs)."""
    try:
        with open("/proc/meminfo", "rb") as handle:
            for line in handle:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return psutil.virtual_memory().available / MB


def free_mb(mem_available: float, cgroup_headroom: float | None) -> float:
    """Free memory as this job sees it: the tighter of the system's MemAvailable and the cgroup's headroom."""
    return mem_available if cgroup_headroom is None else min(mem_available, cgroup_headroom)


def read_free_mb() -> float:
    return free_mb(read_mem_available_mb(), cgroup_memory_headroom_mb())


class FreeMemory:
    """`read_free_mb` for a 20 Hz loop: the cgroup files that hold a limit are found once (walking
    /proc/self/cgroup and the hierarchy costs ~0.6 ms a call here), then only they are read."""

    def __init__(self, cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_SELF_CGROUP) -> None:
        own = _own_paths(proc_cgroup)
        self._pairs: list[tuple[Path, Path]] = []  # (limit file, usage file) for each cgroup with a limit
        if (cgroup_root / "cgroup.controllers").exists():
            for directory in _chain(cgroup_root, own.get("")):
                text = _read(directory / "memory.max")
                if text and text != "max":
                    self._pairs.append((directory / "memory.max", directory / "memory.current"))
        elif (v1 := _v1_dir(cgroup_root, "memory")) is not None:
            for directory in _chain(v1, own.get("memory")):
                limit = _read_int(directory / "memory.limit_in_bytes")
                if limit is not None and limit < _V1_UNLIMITED_BYTES:
                    self._pairs.append((directory / "memory.limit_in_bytes", directory / "memory.usage_in_bytes"))

    def headroom_mb(self) -> float | None:
        rooms = []
        for limit_file, usage_file in self._pairs:
            limit, usage = _read_int(limit_file), _read_int(usage_file)
            if limit is not None and usage is not None:
                rooms.append(max(0.0, (limit - usage) / MB))
        return min(rooms) if rooms else None

    def __call__(self) -> float:
        return free_mb(read_mem_available_mb(), self.headroom_mb())

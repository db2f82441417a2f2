"""The user's dataset, built once per sweep in the runner; the check, the ceiling and every trial are forked from it.

An ImageFolder over ImageNet scans 1.28M files (about a minute): built afresh in every trial, a 12-trial sweep spent
12 minutes building the same dataset. The runner builds it once, before the check; each process it forks inherits
the object (copy-on-write, as a training script's DataLoader workers inherit theirs), and the DataLoader's own start
method still applies to the trial's workers (spawn and forkserver workers get it pickled, as in training).

A build that leaves threads, child processes or open files behind is not shared: a fork carries none of the threads,
and every trial would read through the same file offsets and sockets. The runner then says so, and the driver starts
a fresh runner whose trials each build their own, as `--rebuild-dataset` asks for.

Runs in the runner process (imports torch and the user's code).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass

from loadertop.core.datasets.spec import Loaded, load_spec
from loadertop.core.model.config import Settings
from loadertop.core.trial.procs import has_children


@dataclass(frozen=True)
class SharedBuild:
    """What the runner's build gave: the dataset, its loader arguments and class, and how it went."""

    key: tuple[str, tuple[tuple[str, str], ...]]
    loaded: Loaded
    seconds: float
    mb: float | None  # what the build added to the runner's private memory (the dataset's own size, roughly)
    unsafe: str  # why it cannot be shared ("" when it can)


_SHARED: SharedBuild | None = None


def key_of(settings: Settings) -> tuple[str, tuple[tuple[str, str], ...]]:
    return settings.dataset, tuple(settings.dataset_args)


def build_shared(settings: Settings) -> SharedBuild:
    """Build the dataset here, once, timed; SpecError when the factory fails (one line, as load_spec says)."""
    global _SHARED
    threads, fds, mb = _native_threads(), _open_fds(), _private_mb()
    python_threads = set(threading.enumerate())
    start = time.perf_counter()
    loaded = load_spec(settings.dataset, dict(settings.dataset_args))
    seconds = time.perf_counter() - start
    added = None if mb is None or (after := _private_mb()) is None else max(0.0, after - mb)
    unsafe = _unsafe(python_threads, threads, fds)
    _SHARED = SharedBuild(key_of(settings), loaded, seconds, added, unsafe)
    return _SHARED


def shared() -> SharedBuild | None:
    return _SHARED


def loaded_for(settings: Settings) -> Loaded:
    """The dataset, its extra loader kwargs and its loader class for a trial or the ceiling: the runner's own when it
    built this spec and may share it, else a build of its own (--rebuild-dataset, a fresh runner)."""
    build = _SHARED
    if build is not None and not build.unsafe and build.key == key_of(settings):
        return dataclasses.replace(build.loaded, extra=dict(build.loaded.extra))  # callers add to their extra
    return load_spec(settings.dataset, dict(settings.dataset_args))


def _unsafe(python_threads: set[threading.Thread], threads: int | None, fds: set[int] | None) -> str:
    """Why what the build left behind must not be inherited by every trial ("" when nothing)."""
    found = []
    started = [t.name for t in threading.enumerate() if t not in python_threads and t.is_alive()]
    native = (_native_threads() or 0) - (threads or 0) if threads is not None else 0
    if started or native > 0:
        names = f" ({', '.join(started[:3])})" if started else ""
        found.append(f"{max(len(started), native)} threads{names}")
    if fds is not None and (opened := (_open_fds() or set()) - fds):
        found.append(f"{len(opened)} open files")
    if has_children():
        found.append("child processes")
    return " and ".join(found)


def _native_threads() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def _open_fds() -> set[int] | None:
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    # The listing itself holds an fd, closed by now: keep only those still open.
    return {int(n) for n in names if _is_open(int(n))}


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _private_mb() -> float | None:
    """This process's private memory (USS), from smaps_rollup; None where the kernel has none."""
    try:
        with open("/proc/self/smaps_rollup") as handle:
            kb = sum(int(line.split()[1]) for line in handle if line.startswith(("Private_Clean", "Private_Dirty")))
    except (OSError, ValueError, IndexError):
        return None
    return kb / 1024

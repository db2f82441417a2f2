"""What `loadertop attach` is pointed at: a pid, a job folder or its socket. Checked before anything is shown;
each problem is one AttachError line."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from loadertop.core.model.config import UsageError
from loadertop.core.model.jobs import SOCKET_FILE, JobInfo, job_dir, list_jobs, read_job
from loadertop.core.model.wire import VersionMismatch

HOW_TO_WATCH = (
    "wrap the loader in the training loop: `for batch in loadertop.watch(loader):`, "
    "or attach while a DataLoader with num_workers > 0 runs"
)
WORKER_SCAN_S = 2.0  # how long a job without watch() gets to show workers (between epochs they restart)


class AttachError(UsageError):
    """The target cannot be attached to; the message is one line naming why."""


@dataclass(frozen=True)
class Target:
    pid: int
    command: str
    job: JobInfo | None  # the job's folder when it runs loadertop.watch()/tune()


def find_jobs() -> list[JobInfo]:
    """The watchable jobs on this machine (those that run loadertop.watch or tune), newest first."""
    return list_jobs()


def _process(pid: int) -> psutil.Process:
    if pid <= 0:
        raise AttachError(f"no such process: pid {pid}")
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        raise AttachError(f"no such process: pid {pid}") from None


def command_of(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        return f"pid {process.pid}"


def _short(command: str, limit: int = 80) -> str:
    """A command line fit for a one-line message."""
    text = " ".join(command.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _owner(process: psutil.Process) -> str:
    try:
        return process.username()
    except (psutil.Error, KeyError):
        return "another user"


def _may_not_read(process: psutil.Process) -> AttachError:
    try:
        ours = process.uids().real == os.getuid()
    except psutil.Error:
        ours = False
    if ours:  # same user, still refused: another namespace, or a protected process
        return AttachError(
            f"pid {process.pid} ({_short(command_of(process))}): loadertop may not read this process "
            f"(permission denied by the system)"
        )
    return AttachError(
        f"pid {process.pid} ({_short(command_of(process))}) belongs to {_owner(process)}: "
        f"loadertop may not read another user's process (attach as that user, or as root)"
    )


def check_readable(process: psutil.Process) -> str:
    """The process's executable; AttachError when it is gone or not ours to read (its memory maps are needed)."""
    try:
        exe = process.exe()
        process.memory_full_info()
    except psutil.AccessDenied:
        raise _may_not_read(process) from None
    except psutil.NoSuchProcess:
        raise AttachError(f"no such process: pid {process.pid} (it exited)") from None
    return exe


def _is_python(process: psutil.Process, exe: str) -> bool:
    names = [Path(exe).name]
    with contextlib.suppress(psutil.Error):
        names.append(process.name())
    return any("python" in name.lower() for name in names)


def dataloader_workers(job: psutil.Process) -> list[int]:
    """The job's DataLoader worker processes as psutil sees them: descendants running the job's executable that are
    fork children (the job's command line) or spawn/forkserver children (a multiprocessing command line), less the
    forkserver and the resource tracker. A multiprocessing.Pool of the job looks the same (see docs/attach.md)."""
    try:
        exe, own = job.exe(), job.cmdline()
        children = job.children(recursive=True)
    except psutil.Error:
        return []
    workers = []
    for child in children:
        try:
            if child.exe() != exe or child.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline, parent = child.cmdline(), child.ppid()
        except psutil.Error:
            continue
        text = " ".join(cmdline)
        if "resource_tracker" in text or "semaphore_tracker" in text:
            continue
        if "forkserver import main" in text and parent == job.pid:
            continue  # the forkserver; the workers are its children
        if cmdline == own or "multiprocessing" in text:
            workers.append(child.pid)
    return workers


def _job_folder(text: str) -> JobInfo:
    path = Path(text).expanduser()
    folder = path.parent if path.name == SOCKET_FILE or path.is_socket() else path
    if not path.exists():
        raise AttachError(f"{text}: no such process or job folder")
    job = _read(folder)
    if job is None:
        if not os.access(folder, os.R_OK | os.X_OK):
            raise AttachError(f"{text}: a job folder loadertop may not read (another user's job?)")
        raise AttachError(f"{text}: not a loadertop job folder (no readable job.json)")
    if not psutil.pid_exists(job.pid):
        raise AttachError(f"{text}: its job (pid {job.pid}) is no longer running")
    return job


def _read(folder: Path) -> JobInfo | None:
    """read_job, a job of another loadertop as the one line that says so."""
    try:
        return read_job(folder)
    except VersionMismatch as exc:
        raise AttachError(f"{folder}: {exc}") from None


def _only_job() -> JobInfo:
    jobs = find_jobs()
    if not jobs:
        raise AttachError("no watchable job on this machine (none runs loadertop.watch): give the job's PID")
    if len(jobs) > 1:
        pids = ", ".join(str(job.pid) for job in jobs)
        raise AttachError(f"{len(jobs)} watchable jobs ({pids}): say which one by its PID")
    return jobs[0]


def resolve(target: int | str | None, scan_s: float = WORKER_SCAN_S) -> Target:
    """The checked target. A pid with a readable job folder is a watched job; any other pid must be a Python
    process we may read with DataLoader workers (looked for during `scan_s`)."""
    if target is None:
        job = _only_job()
    elif isinstance(target, str) and not target.strip().isdigit():
        job = _job_folder(target)
    else:
        pid = int(target)
        process = _process(pid)
        found = _read(job_dir(pid))
        if found is None or found.pid != pid:
            return _unwatched(process, scan_s)
        job = found
    process = _process(job.pid)
    check_readable(process)
    return Target(pid=job.pid, command=job.command or command_of(process), job=job)


def _unwatched(process: psutil.Process, scan_s: float) -> Target:
    exe = check_readable(process)
    command = command_of(process)
    if not _is_python(process, exe):
        raise AttachError(f"pid {process.pid} ({_short(command)}) is not a Python process")
    deadline = time.monotonic() + scan_s
    while not dataloader_workers(process):
        if time.monotonic() >= deadline:
            raise AttachError(
                f"pid {process.pid} ({_short(command)}) is a Python process with no DataLoader workers and no "
                f"loadertop.watch: {HOW_TO_WATCH}"
            )
        time.sleep(0.2)
    return Target(pid=process.pid, command=command, job=None)


def publishing_descendants(pid: int) -> list[JobInfo]:
    """The jobs among `pid`'s descendants that publish (torchrun's ranks under the launcher), in pid order."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in sorted(children, key=lambda c: c.pid):
        job = None
        with contextlib.suppress(VersionMismatch):  # another loadertop's rank: resolve says so if asked for it
            job = read_job(job_dir(child.pid))
        if job is not None and job.pid == child.pid and _alive(child):
            found.append(job)
    return found


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def launcher_ranks(target: int | str | None, scan_s: float = WORKER_SCAN_S) -> list[JobInfo] | None:
    """When `target` is the pid of a launcher (a process that does not publish, with descendants that do: torchrun
    and its ranks), the ranks publishing so far, waited for during `scan_s`; None for any other target (a job that
    publishes itself, a job folder, a process with DataLoader workers of its own), which `resolve` checks."""
    if target is None or (isinstance(target, str) and not target.strip().isdigit()):
        return None
    pid = int(target)
    process = _process(pid)
    try:
        own = read_job(job_dir(pid))
    except VersionMismatch:
        return None  # it publishes itself, with another loadertop: `resolve` says so
    if own is not None and own.pid == pid:
        return None
    deadline = time.monotonic() + scan_s
    while True:
        with contextlib.suppress(psutil.Error):
            if not process.children():
                return None  # no descendant to wait for: `resolve` says what the process is
        ranks = publishing_descendants(pid)
        if ranks:
            check_readable(_process(ranks[0].pid))
            return ranks
        if dataloader_workers(process) or time.monotonic() >= deadline:
            return None
        time.sleep(0.2)

"""Where live training jobs publish: one folder per job, named by its pid, mode 0700.

    $LOADERTOP_JOBS_DIR, else $XDG_RUNTIME_DIR/loadertop, else ~/.cache/loadertop/jobs
      <pid>/job.json    the job's JobHello (what `loadertop attach` lists)
      <pid>/sock        the Unix socket viewers connect to
      <pid>/tune.jsonl  loadertop.tune's trace (TuneStep and TuneChose lines); when the job exits it is kept
                        as <pid>-<start time>.tune.jsonl beside the job folders

Both sides use these names: the job's publisher creates the folder, `loadertop attach` reads it.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from loadertop.core.model.live_protocol import JobHello, decode
from loadertop.core.model.wire import ProtocolError, VersionMismatch

JOB_FILE = "job.json"
SOCKET_FILE = "sock"
TUNE_FILE = "tune.jsonl"
# `loadertop run`: the folder put first on the job's PYTHONPATH (its sitecustomize.py installs the DataLoader hook).
RUN_SITE = Path(__file__).resolve().parents[1] / "job" / "site"


def jobs_root() -> Path:
    if override := os.environ.get("LOADERTOP_JOBS_DIR"):
        return Path(override)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "loadertop"
    return Path.home() / ".cache" / "loadertop" / "jobs"


def job_dir(pid: int, root: Path | None = None) -> Path:
    return (root or jobs_root()) / str(pid)


def kept_trace(root: Path, pid: int, started: float) -> Path:
    """Where a job's tune trace is kept once the job has exited (its folder is removed)."""
    return root / f"{pid}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}.tune.jsonl"


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class JobInfo:
    """A watchable job found in the jobs folder."""

    pid: int
    folder: Path
    hello: JobHello

    @property
    def socket(self) -> Path:
        return self.folder / SOCKET_FILE

    @property
    def command(self) -> str:
        return " ".join(self.hello.argv)


def read_job(folder: Path) -> JobInfo | None:
    """The job a folder describes: its job.json read by the live protocol's codec, as the publisher wrote it. None
    when the folder is not a job's (unreadable, malformed); wire.VersionMismatch (one line naming both versions)
    when it is the job of another loadertop, which this one cannot watch."""
    try:
        hello = decode((folder / JOB_FILE).read_text())
    except OSError:
        return None
    except VersionMismatch:
        raise
    except ProtocolError:
        return None
    return JobInfo(pid=hello.pid, folder=folder, hello=hello) if isinstance(hello, JobHello) else None


def list_jobs(root: Path | None = None) -> list[JobInfo]:
    """The live jobs under the jobs folder, newest first. Folders of jobs that are gone are skipped (and removed
    when they are ours: a job killed by SIGKILL cannot clean up after itself)."""
    base = root or jobs_root()
    try:
        folders = [p for p in base.iterdir() if p.is_dir() and p.name.isdigit()]
    except OSError:
        return []
    jobs = []
    for folder in folders:
        try:
            job = read_job(folder)
        except VersionMismatch:
            job = None  # another loadertop's job: not one this one can watch (kept while it runs)
        if job is not None and job.pid == int(folder.name) and pid_alive(job.pid):
            jobs.append(job)
        elif not pid_alive(int(folder.name)):
            remove_job_dir(folder)
    return sorted(jobs, key=lambda j: j.hello.started, reverse=True)


def remove_job_dir(folder: Path) -> None:
    """Remove a job folder and the files loadertop puts there; quietly leave anything else."""
    for name in (SOCKET_FILE, JOB_FILE, TUNE_FILE):
        with contextlib.suppress(OSError):
            (folder / name).unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()

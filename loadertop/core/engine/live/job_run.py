"""`loadertop run -- CMD ARGS...`: the job started with the DataLoader hook on its path, the process of it that
publishes found, its exit code. The faces show the job through the same LiveSession as `loadertop attach`.

The job runs in loadertop's process group, in the foreground: Ctrl-C reaches it from the terminal as it would
without loadertop. loadertop outlives it (`hold_signals`): it shows the job to its end and exits with its code.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import IO

import psutil

from loadertop.core.model.config import UsageError
from loadertop.core.model.jobs import RUN_SITE, JobInfo, kept_trace, list_jobs
from loadertop.core.model.live_protocol import TuneChose, decode
from loadertop.core.model.wire import ProtocolError

POLL_S = 0.1


def _loadertop_home() -> str:
    return str(RUN_SITE.parents[3])  # the folder that holds the loadertop package


def job_env(base: dict[str, str], tune_s: float | None) -> dict[str, str]:
    """The job's environment: the hook's folder first on PYTHONPATH (an existing PYTHONPATH after it)."""
    env = dict(base)
    rest = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(RUN_SITE) + (os.pathsep + rest if rest else "")
    env["LOADERTOP_RUN_HOME"] = _loadertop_home()
    if tune_s is not None:
        env["LOADERTOP_RUN_TUNE"] = repr(float(tune_s))
    else:
        env.pop("LOADERTOP_RUN_TUNE", None)
    return env


def _executable(command: Sequence[str], env: dict[str, str]) -> str:
    if not command:
        raise UsageError("no command after --: loadertop run [options] -- CMD ARGS...")
    name = command[0]
    if os.sep in name:
        if not (os.path.isfile(name) and os.access(name, os.X_OK)):
            raise UsageError(f"command not found: {name} (no such executable file)")
        return name
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise UsageError(f"command not found: {name}")
    return found


def exit_code(returncode: int) -> int:
    """The job's exit status as a shell reports it: a signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class JobRun:
    """The started job. `publisher()` waits for the process of it that publishes (the job itself, or a rank of a
    launcher); `wait()` is its exit code; `tune_snippet()` the `DataLoader(...)` line `--tune` chose."""

    def __init__(self, command: Sequence[str], *, tune_s: float | None = None, output: IO[str] | None = None) -> None:
        env = job_env(dict(os.environ), tune_s)
        argv = [_executable(command, env), *command[1:]]
        self.command = tuple(command)
        self.job: JobInfo | None = None
        try:
            self._proc = subprocess.Popen(argv, env=env, stdout=output, stderr=output)
        except OSError as exc:
            raise UsageError(f"cannot start {command[0]}: {exc.strerror or exc}") from None
        self.pid = self._proc.pid

    def _family(self) -> set[int]:
        try:
            return {self.pid, *(p.pid for p in psutil.Process(self.pid).children(recursive=True))}
        except psutil.Error:
            return {self.pid}

    def publisher(self, timeout_s: float | None = None) -> JobInfo | None:
        """The job folder of the job's first process to publish (the job or one of its descendants); None when
        the job exits first (or after timeout_s)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self._proc.poll() is None:
            family = self._family()
            mine = [job for job in list_jobs() if job.pid in family]
            if mine:
                self.job = min(mine, key=lambda job: job.hello.started)
                return self.job
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)
        return None

    def view_target(self, found: JobInfo) -> int:
        """What to attach to once `found` published: itself when it is the job, else the job's own pid (a launcher:
        torchrun's ranks are all followed under it, engine/live/ranks.py)."""
        return found.pid if found.pid == self.pid else self.pid

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def wait(self) -> int:
        while True:
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is the job's: it decides when it ends
                return exit_code(self._proc.wait())

    def interrupt(self) -> None:
        """SIGINT to the job (for a face that takes the terminal's keys: Ctrl-C there is the job's)."""
        with contextlib.suppress(OSError):
            self._proc.send_signal(signal.SIGINT)

    def tune_snippet(self) -> str | None:
        """What `--tune` chose (the job's kept tune trace), once the job has exited."""
        chose = self.tune_choice()
        return None if chose is None else chose.snippet

    def tune_choice(self) -> TuneChose | None:
        """`--tune`'s settling (the job's kept tune trace: the line, and why), once the job has exited."""
        job = self.job
        if job is None:
            return None
        path = kept_trace(job.folder.parent, job.pid, job.hello.started)
        chose = None
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                with contextlib.suppress(ProtocolError):
                    message = decode(line)
                    if isinstance(message, TuneChose):
                        chose = message
        return chose


@contextlib.contextmanager
def hold_signals(run: JobRun) -> Iterator[None]:
    """While the job runs: Ctrl-C (SIGINT, which the terminal sends the job too) does not stop loadertop, and
    SIGTERM/SIGHUP sent to loadertop are passed on to the job. Handlers, not SIG_IGN: the job does not inherit them."""
    seen: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        seen.append(signum)
        if signum != signal.SIGINT:
            with contextlib.suppress(OSError):
                os.kill(run.pid, signum)

    names = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {signum: signal.signal(signum, on_signal) for signum in names}
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def start_job(command: Sequence[str], *, tune_s: float | None = None, log: Path | None = None) -> JobRun:
    """Start the job (UsageError, one line, when it cannot start). `log`: its stdout and stderr go there."""
    if tune_s is not None and not tune_s > 0:
        raise UsageError(f"--tune {tune_s:g}: must be more than 0 seconds")
    if log is None:
        return JobRun(command, tune_s=tune_s)
    with log.open("a", encoding="utf-8") as output:
        return JobRun(command, tune_s=tune_s, output=output)

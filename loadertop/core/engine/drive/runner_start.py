"""Starting a runner warm: fork it from the runner template (trial/runner_template.py), which imported torch once.

A runner exec'd for every sweep imports torch every time (about a second of CPU). The template pays that once per
loadertop process and forks a runner per sweep in milliseconds. The forked runner is the exec'd one in every way
the driver can tell: the same stdin, stdout and stderr, environment, working directory, import path and session.
Whatever goes wrong with the template (it cannot start, it left while idle, the socket breaks), `fork_runner`
returns None and the caller execs the runner as before: the template is an optimisation, never a dependency.

A template serves only an environment whose import-time variables (those torch, its thread pools and Python read
while importing) are the ones it imported with; another such environment gets a template of its own.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO

from loadertop.core.model.template_protocol import (
    ForkRunner,
    KeepWarm,
    RunnerForked,
    TemplateMessage,
    TemplateReady,
    decode,
    encode,
)

TEMPLATE_ARGV = (sys.executable, "-m", "loadertop.core.trial.runner_template")
TEMPLATE_START_TIMEOUT = 120.0  # importing torch on a cold, busy machine can take a while
REPLY_TIMEOUT = 10.0  # a fork and a pid
# Variables read while torch (and Python) start: a template imported under other values would not be this runner.
IMPORT_TIME = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS", "TORCH", "PYTORCH", "CUDA", "NVIDIA", "LD_",
               "MALLOC")  # fmt: skip
NOT_IMPORT_TIME = ("PYTHONPATH", "PYTHONUNBUFFERED")  # the runner's own, set in the forked child


class ForkedRunner:
    """A runner the template forked: the part of Popen the driver uses. The kernel reaps it (it is the template's
    child), so a pidfd tells when it is gone; its exit status is not known here (the driver never needed it)."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # gone already
            self._pidfd, self.returncode = None, 0

    def poll(self) -> int | None:
        return self.wait(0) if self._gone(0) else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._gone(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd, self.returncode = None, 0
        return 0

    def _gone(self, timeout: float | None) -> bool:
        if self._pidfd is None:
            return True
        readable, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(readable)


class RunnerTemplate:
    """The template process and the driver's end of its socket."""

    def __init__(self, key: tuple[tuple[str, str], ...], env: Mapping[str, str]) -> None:
        self.key = key
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.proc = subprocess.Popen(
                [*TEMPLATE_ARGV, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # a template that fails leaves the exec'd runner to say why, in the log
                start_new_session=True,  # no terminal signal reaches it
                env=dict(env),
            )
        self.ready = False

    def wait_ready(self, cancelled: threading.Event) -> bool:
        """Whether the template imported torch and is waiting; False if it failed, or cancelled."""
        deadline = time.monotonic() + TEMPLATE_START_TIMEOUT
        while not self.ready and time.monotonic() < deadline and not cancelled.is_set():
            readable, _, _ = select.select([self.sock], [], [], 0.1)
            if readable:
                try:
                    self.ready = isinstance(self._reply(), TemplateReady)
                except (OSError, ValueError):  # it failed to import torch (the exec'd runner will say why), or it is
                    return False  # another loadertop's (a ProtocolError)
                return self.ready
        return self.ready

    def fork(self, env: Mapping[str, str], stderr: int, main: str = "runner") -> ForkedRunner:
        """A runner (`main`: or the stages child) with this environment and stderr, and pipes for its stdin and
        stdout; OSError if the template is gone."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            request = encode(fork_request(env, os.getcwd(), main))
            socket.send_fds(self.sock, [request], [stdin_r, stdout_w, stderr])
            readable, _, _ = select.select([self.sock], [], [], REPLY_TIMEOUT)
            reply = self._reply() if readable else None
            if not isinstance(reply, RunnerForked):
                raise OSError("the runner template did not fork a runner")
            pid = reply.pid
        except BaseException:
            for fd in (stdin_w, stdout_r):
                os.close(fd)
            raise
        finally:
            for fd in (stdin_r, stdout_w):
                os.close(fd)
        return ForkedRunner(pid, open(stdin_w, "wb"), open(stdout_r, "rb"))

    def _reply(self) -> TemplateMessage:
        """The template's next message; OSError when it is gone, ProtocolError (a ValueError) for anything else."""
        raw = self.sock.recv(4096)
        if not raw:
            raise OSError("the runner template is gone")
        return decode(raw)

    def close(self) -> None:
        self.sock.close()  # the template leaves at EOF
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(2.0)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def fork_request(env: Mapping[str, str], cwd: str, main: str = "runner") -> ForkRunner:
    """The request for a runner with this environment and directory, and what a child of this process inherits
    besides, as it is now: resource limits, the CPUs it may use, the umask (a test or a user may have lowered the
    open-file limit since the template began)."""
    limits = {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")}
    cpus = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    return ForkRunner(env=dict(env), cwd=cwd, limits=limits, cpus=cpus, umask=_umask(), main=main)


def _umask() -> int:
    # Read, not set and set back: other threads of this process may be creating files meanwhile
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


_lock = threading.Lock()
_template: RunnerTemplate | None = None


def template_pid() -> int | None:
    """The pid of this process's runner template, if one is running (tests tell it from a leftover by this)."""
    return _template.proc.pid if _template is not None and _template.proc.poll() is None else None


def keep_warm() -> None:
    """Tell this process's template, if one is ready, that a sweep still runs: it stays for the sweep's end (its
    stages child is forked from it) instead of leaving after its idle minutes. Never blocks, never fails."""
    with _lock:
        if _template is not None and _template.ready and _template.proc.poll() is None:
            with contextlib.suppress(OSError):
                _template.sock.send(encode(KeepWarm()), socket.MSG_DONTWAIT)


def fork_runner(
    env: Mapping[str, str], stderr: int, cancelled: threading.Event, main: str = "runner"
) -> ForkedRunner | None:
    """A runner (`main`: or the stages child) forked from this process's template (started, or replaced, as
    needed); None where that failed and it should be exec'd instead."""
    global _template
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME) and k not in NOT_IMPORT_TIME))
    with _lock:
        for _attempt in range(2):  # a template that left while idle is started afresh, once
            if _template is not None and (_template.key != key or _template.proc.poll() is not None):
                _template.close()
                _template = None
            if _template is None:
                _template = RunnerTemplate(key, env)
            if not _template.wait_ready(cancelled):
                if not cancelled.is_set():
                    _template.close()
                    _template = None
                return None
            try:
                return _template.fork(env, stderr, main)
            except OSError:
                _template.close()
                _template = None
        return None

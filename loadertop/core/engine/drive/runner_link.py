"""The driver's end of the runner: the exec'd process, its decoded messages, and reading them with a deadline.

The runner (trial/runner.py) speaks the protocol in model/protocol.py: requests go in on its stdin, messages come
back on its stdout, one JSON line each. A reader thread decodes them into a queue; None there means the runner is
gone. A line that does not decode is a bug on one side or a runner from another install: it ends the sweep with
the decoder's reason rather than being guessed at.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from loadertop.core.model.protocol import Exited, Forked, ProtocolError, Ready, Reply, Request, decode_reply, encode

RUNNER_START_TIMEOUT = 120.0  # importing torch on a cold, busy machine can take a while
RUNNER_ARGV = (sys.executable, "-m", "loadertop.core.trial.runner")


class Cancelled(Exception):
    """The sweep was cancelled while the driver waited for the runner."""


class RunnerProcess:
    """The exec'd runner: one per sweep, in its own session so terminal signals never reach workers."""

    def __init__(self, log_path: Path, argv: Sequence[str] = RUNNER_ARGV) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 (lives as long as the runner)
        # The runner imports what the caller can import (as multiprocessing's spawn does with sys.path).
        path = os.pathsep.join(p for p in [*sys.path, os.environ.get("PYTHONPATH", "")] if p)
        self.tmp = runner_tmp()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, "TMPDIR": str(self.tmp)}
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
            env=env,
        )
        self.messages: queue.Queue[Reply | ProtocolError | None] = queue.Queue()
        threading.Thread(target=self._read, name="loadertop-runner-reader", daemon=True).start()

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        with stdout:  # closed at EOF: whoever still holds this RunnerProcess holds no pipe
            for raw in stdout:
                try:
                    self.messages.put(decode_reply(raw))
                except ProtocolError as exc:
                    self.messages.put(exc)
        self.messages.put(None)  # EOF: the runner is gone

    def get(self, timeout: float) -> Reply | None:
        """The next message (None: the runner is gone); queue.Empty after `timeout` seconds without one."""
        item = self.messages.get(timeout=timeout)
        if isinstance(item, ProtocolError):
            raise RuntimeError(f"the runner sent a line loadertop cannot read: {item}")
        return item

    def send(self, request: Request) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(encode(request).encode())
        self.proc.stdin.flush()

    def next(self, timeout: float, doing: str, cancelled: threading.Event) -> Reply:
        """The next message; raises Cancelled, or RuntimeError when the runner exits or says nothing in time."""
        deadline = time.monotonic() + timeout
        while True:
            if cancelled.is_set():
                raise Cancelled
            try:
                message = self.get(timeout=0.1)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the runner did not {doing} within {timeout:.0f} s") from None
                continue
            if message is None:
                raise RuntimeError(f"the runner exited while trying to {doing}: {log_tail(self.log_path)}")
            return message

    def drain_until_exit(self, timeout: float = 2.0) -> None:
        """After a cancel: read until the trial's Exited, killing a trial forked meanwhile (its group was not known
        to the driver yet)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = self.get(timeout=0.05)
            except queue.Empty:
                continue
            if message is None or isinstance(message, Exited):
                return
            if isinstance(message, Forked):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(message.pid, signal.SIGKILL)

    def close(self, grace: float = 1.0) -> None:
        """Closing stdin tells the runner to kill any running trial and exit; SIGKILL if it dawdles."""
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        # Whatever the user's dataset started in the runner's own group (a pool its factory left behind) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.tmp.exists():  # a trial's worker was still exiting (removing its own pymp-*): again at exit
            atexit.register(shutil.rmtree, self.tmp, ignore_errors=True)


SOCKET_PATH_MAX = 107  # an AF_UNIX address, the bytes before its NUL (Linux's sun_path is 108)
# What the runner's processes add below it: lt…/pymp-…/listener-… (multiprocessing's fd-passing socket)
SOCKET_TAIL = len("/ltxxxxxxxx/pymp-xxxxxxxx/listener-xxxxxxxx")


def runner_tmp() -> Path:
    """The runner's own temporary folder, removed when it closes: a killed trial or worker never removes the
    pymp-* folder multiprocessing made for it (a sweep left ~35 in /tmp). Under a TMPDIR too long for the
    sockets multiprocessing makes there (PyTorch's workers hand over batches through one: "AF_UNIX path too long",
    and the loader hangs), it goes under /tmp instead."""
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) + SOCKET_TAIL > SOCKET_PATH_MAX and os.access("/tmp", os.W_OK):
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="lt", dir=base))


def start_runner(log_path: Path, cancelled: threading.Event, argv: Sequence[str] = RUNNER_ARGV) -> RunnerProcess:
    """Exec the runner and wait for its Ready; a runner of another protocol version is refused here."""
    runner = RunnerProcess(log_path, argv)
    try:
        message = runner.next(RUNNER_START_TIMEOUT, "start the runner (import torch)", cancelled)
        if not isinstance(message, Ready):
            raise RuntimeError(f"runner said {message!r} instead of ready")
    except BaseException:
        runner.close()
        raise
    return runner


def log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])

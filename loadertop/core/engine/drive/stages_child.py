"""The stages child (trial/stages_main.py): started in its own session, handed one request, read back through the
stages protocol, and killed with everything in its session whichever way the wait ends (its answer, the deadline, the
caller's cancel). `loadertop stages` (stages_run.py) and a sweep's stages step (stages_step.py) both start it here.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from loadertop.core.engine.drive.runner_link import log_tail, runner_tmp
from loadertop.core.engine.drive.runner_start import ForkedRunner, fork_runner
from loadertop.core.model.config import DataError, UsageError
from loadertop.core.model.stages import StagesMeasurement
from loadertop.core.model.stages_protocol import (
    ProtocolError,
    StagesFailed,
    StagesReady,
    StagesRequest,
    decode,
    encode,
)

CHILD_ARGV = (sys.executable, "-m", "loadertop.core.trial.stages_main")
POLL_S = 0.1  # how often a wait that can be cancelled looks at its event


class StagesCancelled(Exception):
    """The caller's cancel event was set while the child measured: it was killed, nothing was measured."""


def child_env(tmp: Path) -> dict[str, str]:
    """The caller's environment, with what it can import on the child's path (as the runner's)."""
    path = os.pathsep.join(p for p in [*sys.path, os.environ.get("PYTHONPATH", "")] if p)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, "TMPDIR": str(tmp)}


Child = subprocess.Popen[bytes] | ForkedRunner


def run_child(
    request: StagesRequest,
    timeout: float,
    cancel: threading.Event | None = None,
    started: Callable[[int], None] | None = None,
    hint: str = " (--timeout S allows more)",
    warm: bool = False,
) -> StagesMeasurement:
    """Start the child, hand it the request, wait for its answer (at most `timeout` seconds, StagesCancelled once
    `cancel` is set), kill what is left. `started` hears the child's pid (its process group's id) first. `warm`: fork
    it from the runner template, which has torch imported (a sweep's runner left it warm), where one can be had."""
    tmp = runner_tmp()
    log_path = tmp / "stages.log"
    try:
        with open(log_path, "wb") as log:
            child = start_child(child_env(tmp), log, warm, cancel)
            try:
                if started is not None:
                    started(child.pid)
                out = exchange(child, encode(request).encode(), timeout, cancel)
            except subprocess.TimeoutExpired:
                raise UsageError(f"the dataset's stages took more than {timeout:.0f} s{hint}: "
                                 f"{log_tail(log_path) or 'no output'}") from None  # fmt: skip
            finally:
                kill_group(child)
        return read_answer(out, child.returncode, log_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def start_child(env: dict[str, str], log: BinaryIO, warm: bool, cancel: threading.Event | None) -> Child:
    """The child in its own session: forked from the runner template when `warm` and one answers, else exec'd."""
    forked = fork_runner(env, log.fileno(), cancel or threading.Event(), main="stages") if warm else None
    if forked is not None:
        return forked
    return subprocess.Popen(list(CHILD_ARGV), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                            start_new_session=True, env=env)  # fmt: skip


def exchange(child: Child, request: bytes, timeout: float, cancel: threading.Event | None) -> bytes:
    """The request on the child's stdin, then its stdout until it closes; TimeoutExpired past `timeout`,
    StagesCancelled once `cancel` is set (looked at every POLL_S)."""
    assert child.stdin is not None and child.stdout is not None
    with contextlib.suppress(BrokenPipeError):  # a child that died first: its stdout says so (nothing)
        child.stdin.write(request)
        child.stdin.close()
    deadline, fd = time.monotonic() + timeout, child.stdout.fileno()
    chunks: list[bytes] = []
    while True:
        if cancel is not None and cancel.is_set():
            raise StagesCancelled
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(CHILD_ARGV[-1], timeout)
        readable, _, _ = select.select([fd], [], [], min(POLL_S, left))
        if readable:
            data = os.read(fd, 1 << 16)
            if not data and cancel is not None and cancel.is_set():
                raise StagesCancelled  # the canceller killed it (a sweep's cancel kills the group it knows)
            if not data:
                return b"".join(chunks)
            chunks.append(data)


def kill_group(child: Child) -> None:
    """The child and everything in its session (its DataLoader workers), then the child reaped, its pipes closed."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def read_answer(out: bytes, returncode: int | None, log_path: Path) -> StagesMeasurement:
    """The measurement from the child's lines; UsageError or DataError for the user's input, RuntimeError else."""
    lines = [line for line in out.splitlines() if line.strip()]
    try:
        messages = [decode(line) for line in lines]
    except ProtocolError as exc:
        raise RuntimeError(f"the stages child said something loadertop cannot read: {exc}") from None
    if not messages or not isinstance(messages[0], StagesReady):
        tail = log_tail(log_path) or "no output"
        raise RuntimeError(f"the stages child exited (code {returncode}) before it answered: {tail}")
    answer = messages[-1]
    if isinstance(answer, StagesMeasurement):
        return answer
    if isinstance(answer, StagesFailed) and answer.kind == "spec":
        raise UsageError(answer.error)
    if isinstance(answer, StagesFailed) and answer.kind == "data":
        raise DataError(answer.error, answer.error)
    if isinstance(answer, StagesFailed):
        raise RuntimeError(f"the stages child failed: {answer.error} ({log_tail(log_path)})")
    tail = log_tail(log_path) or "no output"
    raise RuntimeError(f"the stages child exited (code {returncode}) without its measurement: {tail}")

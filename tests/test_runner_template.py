"""The runner forked from a template that imported torch once (engine/drive/runner_start.py): the same runner as
an exec'd one, reused across sweeps, replaced when it is gone or the environment torch imports under changed."""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from loadertop.core.engine.drive.runner_link import start_runner
from loadertop.core.engine.drive.runner_start import keep_warm, template_pid
from loadertop.core.model.config import Settings
from loadertop.core.model.protocol import Checked, CheckRequest

SPEC = "synthetic:cpu_ms=0,io_ms=0,kb=1,length=64"


def started(tmp_path: Path, name: str) -> tuple[int, int]:
    """Start a runner and check its dataset; its pid and its parent's."""
    runner = start_runner(tmp_path / f"{name}.log", threading.Event())
    try:
        pid = runner.proc.pid
        parent = psutil.Process(pid).ppid()
        assert os.getsid(pid) == pid  # its own session, as the exec'd runner's
        runner.send(CheckRequest(Settings(dataset=SPEC), ("fork",)))
        reply = runner.next(60, "check the dataset", threading.Event())
        assert isinstance(reply, Checked) and reply.ok and reply.length == 64, reply
        return pid, parent
    finally:
        runner.close()


def test_sweeps_in_one_process_fork_their_runners_from_one_template(tmp_path: Path) -> None:
    first, parent = started(tmp_path, "a")
    second, parent_again = started(tmp_path, "b")
    template = template_pid()
    assert template is not None and parent == parent_again == template and first != second
    assert "runner_template" in " ".join(psutil.Process(template).cmdline())
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE


def test_a_template_kept_warm_by_a_sweep_still_forks_its_runners(tmp_path: Path) -> None:
    _, parent = started(tmp_path, "a")
    keep_warm()  # not answered: the next fork's reply is the fork's
    keep_warm()
    _, parent_again = started(tmp_path, "b")
    assert parent == parent_again == template_pid()


def test_a_template_that_is_gone_is_started_again(tmp_path: Path) -> None:
    started(tmp_path, "a")
    old = template_pid()
    assert old is not None
    os.kill(old, signal.SIGKILL)
    psutil.Process(old).wait(5)
    _, parent = started(tmp_path, "b")
    assert parent == template_pid() != old


def test_another_import_time_environment_gets_a_template_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started(tmp_path, "a")
    old = template_pid()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read when torch starts: a template of other values would lie
    _, parent = started(tmp_path, "b")
    assert parent == template_pid() != old
    deadline = time.monotonic() + 5
    while old is not None and psutil.pid_exists(old) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert old is None or not psutil.pid_exists(old)  # the old one left (closed, and reaped)
    monkeypatch.setenv("LOADERTOP_JOBS_DIR", str(tmp_path))  # not read at import: the same template serves
    _, parent_again = started(tmp_path, "c")
    assert parent_again == parent


def test_the_runner_inherits_this_process_limits_as_they_are_now_not_the_templates(tmp_path: Path) -> None:
    started(tmp_path, "a")  # the template exists, started under the limits of then
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
    try:
        runner = start_runner(tmp_path / "b.log", threading.Event())
        try:
            assert psutil.Process(runner.proc.pid).rlimit(psutil.RLIMIT_NOFILE) == (200, hard)
            assert psutil.Process(runner.proc.pid).ppid() == template_pid()  # forked, not exec'd
        finally:
            runner.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# A template of another loadertop: it says it is ready in another protocol version, then waits to be asked.
OTHER_VERSION = """
import json, os, socket, sys, time
sock = socket.socket(fileno=int(sys.argv[1]))
sock.send(json.dumps({"type": "ready", "version": 999, "pid": os.getpid()}).encode())
sock.recv(4096)
"""


def test_a_template_of_another_protocol_version_is_never_asked_to_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadertop.core.engine.drive import runner_start

    monkeypatch.setattr(runner_start, "_template", None)  # this process's own template stays as it is
    monkeypatch.setattr(runner_start, "TEMPLATE_ARGV", (sys.executable, "-c", OTHER_VERSION))
    pid, parent = started(tmp_path, "a")
    assert parent == os.getpid() and pid != parent  # exec'd by this process, as without a template
    assert runner_start._template is None  # the other one was closed and forgotten

from __future__ import annotations

import multiprocessing.process
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A parent folder for run folders, so tests never write to ~/.cache."""
    path = tmp_path / "runs"
    path.mkdir()
    return path


@pytest.fixture
def jobs_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short jobs folder for live jobs (Unix socket paths are limited to 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="lt", dir="/tmp"))
    monkeypatch.setenv("LOADERTOP_JOBS_DIR", str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """Fail the test if it leaves any child process of the test process behind."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    psutil.wait_procs([p for p in me.children(recursive=True) if p.pid not in before], timeout=3)
    left = [p for p in me.children(recursive=True) if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"


class StartedAProcess(RuntimeError):
    """A test marked `unit` started a subprocess or a process: it belongs to the slower tier."""


@pytest.fixture(autouse=True)
def unit_starts_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`pytest -m unit` is the inner loop: a test marked `unit` (or `tui`, `heavy`: in-process too) may start no
    subprocess and no DataLoader worker.
    Enforced, not trusted: starting one raises, and the test fails even if it caught the error.
    LOADERTOP_UNIT_PROBE=FILE guards every test and lists those that start something in FILE (to mark the tiers)."""
    probe = os.environ.get("LOADERTOP_UNIT_PROBE")
    in_process = any(request.node.get_closest_marker(tier) for tier in ("unit", "tui", "heavy"))
    if not in_process and not probe:
        yield
        return
    started: list[str] = []

    def refuse(what: str) -> Callable[..., Any]:
        def start(*args: Any, **kwargs: Any) -> Any:
            started.append(what)
            raise StartedAProcess(f"a test marked in-process started {what}: mark it by what it starts")

        return start

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("a subprocess"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse("a multiprocessing process"))
    monkeypatch.setattr(os, "fork", refuse("a fork"))
    monkeypatch.setattr(os, "posix_spawn", refuse("a spawned process"))
    yield
    if probe and started:
        with open(probe, "a") as f:
            f.write(request.node.nodeid + "\n")
    elif started:
        pytest.fail(f"a test marked in-process started {started[0]}: mark it by what it starts")

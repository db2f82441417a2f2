from __future__ import annotations

import compileall
import fcntl
import multiprocessing.process
import os
import shutil
import subprocess
import tempfile
import threading
import time
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
    from procs import alive, own_children

    before = {p.pid for p in own_children()}
    yield
    psutil.wait_procs([p for p in own_children() if p.pid not in before], timeout=3)
    left = [p.pid for p in own_children() if p.pid not in before and alive(p.pid)]  # one may end while read
    assert not left, f"processes left behind: {[(pid, name_of(pid)) for pid in left]}"


def name_of(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline()) or psutil.Process(pid).name()
    except psutil.Error:
        return "(gone)"


class StartedAProcess(RuntimeError):
    """A test marked `unit` started a subprocess or a process: it belongs to the slower tier."""


@pytest.fixture(autouse=True)
def unit_starts_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`pytest -m unit` is the inner loop: a test marked `unit` (or `tui`, `heavy`: in-process too) may start no
    subprocess and no DataLoader worker.
    Enforced, not trusted: starting one raises, and the test fails even if it caught the error.
    LOADERTOP_UNIT_PROBE=FILE guards every test and lists those that start something in FILE (to mark the tiers)."""
    probe = os.environ.get("LOADERTOP_UNIT_PROBE")
    if not in_process(request.node) and not probe:
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


@pytest.fixture(autouse=True)
def machine_to_itself(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under pytest-xdist, a test marked `solo` has the machine to itself: its verdict compares measured speeds (one
    configuration beating another, a transport bound), which a neighbour's workers on 2 cores would decide instead.
    Every other test holds the machine shared. A readers-writer lock over the run's workers, with a turnstile so a
    waiting solo test is not starved by the shared ones."""
    workerinput = getattr(request.config, "workerinput", None)  # only a real xdist worker (not a child pytest)
    if workerinput is None:
        yield
        return
    solo = request.node.get_closest_marker("solo") is not None
    base = Path(tempfile.gettempdir()) / f"loadertop-tests-{workerinput['testrunuid']}"
    with open(f"{base}.turnstile", "a") as turnstile, open(f"{base}.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)  # a solo test waiting holds it: no shared one starts meanwhile
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if solo else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_configure_node(node: Any) -> None:
    """pytest-xdist's hook, on the controller: hand each worker the terminal size variables as the run had them."""
    node.workerinput["terminal_env"] = {name: os.environ.get(name) for name in ("COLUMNS", "LINES")}


def pytest_configure(config: pytest.Config) -> None:
    # An xdist worker starts with COLUMNS=80 and LINES=24 of its own; the headless face reads $COLUMNS for files
    # and pipes, so a worker would render tables narrower than the same test run without -n.
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        for name, value in workerinput.get("terminal_env", {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    else:
        compile_once()
        rewrite_once(config)


def rewrite_once(config: pytest.Config) -> None:
    """pytest rewrites the asserts of each test module as it imports it, and with PYTHONDONTWRITEBYTECODE set keeps
    no cache of that: every xdist worker rewrote every test module (11 s of CPU each, 17 s before the first test on 2
    cores). It still reads a cached module it finds, so the controller writes each once for all of them. pytest's
    own steps (its internals): anything missing and the workers rewrite as before."""
    try:
        from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, assertstate_key
        from _pytest.assertion.rewrite import get_cache_dir as cache_dir_of

        state = config.stash[assertstate_key]
    except (ImportError, KeyError):
        return
    for fn in sorted(Path(__file__).parent.glob("**/*.py")):
        if not (fn.name.startswith("test_") or fn.name == "conftest.py"):
            continue
        pyc = cache_dir_of(fn) / (fn.name[:-3] + PYC_TAIL)
        if _read_pyc(fn, pyc) is None:
            pyc.parent.mkdir(exist_ok=True)
            source_stat, code = _rewrite_test(fn, config)
            _write_pyc(state, code, source_stat, pyc)


def compile_once() -> None:
    """Every CLI, runner and job the suite starts imports loadertop afresh, and with PYTHONDONTWRITEBYTECODE set (in
    CI too) none writes the bytecode it compiles: each compiled every module again (0.6 s an import, 0.35 s with
    the bytecode there). Python still reads bytecode it finds, so the controller writes it once for all of them."""
    root = Path(__file__).resolve().parents[1]
    for folder in ("loadertop", "tests"):
        compileall.compile_dir(root / folder, quiet=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under xdist: the solo tests first, then the tests that start processes (the long ones), then the in-process
    # tiers (fractions of a second each). A solo test waits for the tests running beside it to end, and idles the
    # other workers meanwhile: at the start those are the first tests to run, not a 40 s soak halfway through. At the
    # end, a worker that runs out steals the last half of another's queue (worksteal): quick tests, not a solo one.
    # (A stable sort: the same order on every worker, as xdist requires.)
    if getattr(config, "workerinput", None) is not None:
        items.sort(key=lambda item: (item.get_closest_marker("solo") is None, in_process(item)))


def in_process(item: pytest.Item) -> bool:
    """Whether the test runs in pytest's own process (the unit, tui and heavy tiers): quick, or at least no process
    of its own."""
    return any(item.get_closest_marker(tier) for tier in ("unit", "tui", "heavy"))


# The threads loadertop's own side starts; a job's publisher lives as long as the job's process, by design.
OWN_THREADS = ("loadertop-probes", "loadertop-attach-socket", "loadertop-driver", "loadertop-memory-guard",
               "loadertop-runner-reader", "loadertop-heartbeat", "loadertop-openmetrics")  # fmt: skip


@pytest.fixture(autouse=True)
def no_thread_leftovers() -> Iterator[None]:
    """Fail the test if a thread of loadertop's it started is still alive 3 s after it (a view, a sweep, a server
    left running: every later test in the worker would see it)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 3
    while left := [t.name for t in threading.enumerate() if t not in before and t.name in OWN_THREADS and t.is_alive()]:
        if time.monotonic() > deadline:
            pytest.fail(f"threads left running: {left}")
        time.sleep(0.05)

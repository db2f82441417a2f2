"""Every process of a run, collected while it runs, and the check that none survives it.

Helpers for the fault, signal, guard, durability and soak tests (no torch here: the test process is the driver).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from loadertop.core.model.events import Event, ProbeSample, TrialStarted

FAULTS = str(Path(__file__).with_name("fault_datasets.py"))


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Family:
    """Descendants of `root` (default: this process) that appear while a run goes on, plus the pids its
    events name (trial main process, workers). `watch()` polls in a thread, for runs in another process."""

    def __init__(self, root: int | None = None) -> None:
        self.root = psutil.Process(root if root is not None else os.getpid())
        self.before = set() if root is not None else {p.pid for p in self.root.children(recursive=True)}
        self.pids: set[int] = set() if root is None else {root}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def look(self) -> None:
        try:
            children = self.root.children(recursive=True)
        except psutil.NoSuchProcess:
            return
        self.pids |= {p.pid for p in children if p.pid not in self.before}

    def see(self, event: Event) -> None:
        if not isinstance(event, ProbeSample):  # a scan of /proc per probe tick would slow the consumer
            self.look()
        if isinstance(event, TrialStarted):
            self.pids |= {event.pid, *event.worker_pids}
        elif isinstance(event, ProbeSample):
            self.pids |= {w.pid for w in event.workers}

    def watch(self, interval: float = 0.05) -> Family:
        def run() -> None:
            while not self._stop.wait(interval):
                self.look()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def count(self) -> int:
        """Processes of the run alive right now (the root included when it is one of them)."""
        return sum(alive(p) for p in list(self.pids))

    def gone_within(self, seconds: float) -> float:
        """Seconds until every process of the run is gone; AssertionError naming the survivors otherwise."""
        self.stop()
        start = time.monotonic()
        while True:
            left = [p for p in list(self.pids) if alive(p)]
            if not left:
                return time.monotonic() - start
            if time.monotonic() - start > seconds:
                names = []
                for pid in left:
                    try:
                        names.append(f"{pid} {' '.join(psutil.Process(pid).cmdline())[:80]}")
                    except psutil.NoSuchProcess:
                        continue
                if names:
                    raise AssertionError(f"still running {seconds:g} s later: {names}")
                return time.monotonic() - start
            time.sleep(0.02)


def start_loadertop(*args: str, **popen: object) -> subprocess.Popen[str]:
    """`loadertop --headless ...` in its own session (as a shell job would be), output captured."""
    options: dict[str, object] = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    options.update(popen)
    return subprocess.Popen(  # type: ignore[call-overload]
        [sys.executable, "-m", "loadertop", "--headless", *args], text=True, start_new_session=True, **options
    )


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)

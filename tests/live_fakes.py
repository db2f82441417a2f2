"""Stand-ins for a live training job, for the attach tests.

`FakeJob`: a tiny job publisher on a real Unix socket in a real job folder, speaking model/live_protocol (hello
first, then what the test sends, to every viewer). `start_loader_job`: a real training-like subprocess whose
DataLoader runs 2 real worker processes and no loadertop.watch().
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from loadertop.core.model.jobs import JOB_FILE, SOCKET_FILE, job_dir
from loadertop.core.model.live_protocol import LIVE_PROTOCOL_VERSION, JobBye, JobHello, LiveMessage, encode


class FakeJob:
    """A job folder for `pid` with a listening socket. Each viewer gets the hello, the history, then every
    `send()`. `bye()` says goodbye and closes every connection (what the job's publisher does at exit)."""

    def __init__(self, root: Path, pid: int | None = None, version: int = LIVE_PROTOCOL_VERSION) -> None:
        self.pid = os.getpid() if pid is None else pid
        self.folder = job_dir(self.pid, root)
        self.folder.mkdir(mode=0o700, parents=True)
        self._t0 = time.monotonic()
        self.hello = JobHello(
            version=LIVE_PROTOCOL_VERSION, pid=self.pid, argv=("python", "train.py"), started=time.time(),
            hostname="test", loadertop="0",
        )  # fmt: skip
        self._hello_line = encode(self.hello)
        if version != LIVE_PROTOCOL_VERSION:  # what a job of another loadertop says, in its folder and its socket
            self._hello_line = self._hello_line.replace(f'"version": {LIVE_PROTOCOL_VERSION}', f'"version": {version}')
        (self.folder / JOB_FILE).write_text(self._hello_line)
        self.history: list[LiveMessage] = []
        self._viewers: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.folder / SOCKET_FILE))
        self._server.listen(8)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                with suppress(OSError):
                    conn.sendall((self._hello_line + "".join(encode(m) for m in self.history)).encode())
                self._viewers.append(conn)

    @property
    def viewers(self) -> int:
        with self._lock:
            return len(self._viewers)

    def wait_viewers(self, count: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self.viewers < count:
            assert time.monotonic() < deadline, f"{self.viewers} viewers connected, expected {count}"
            time.sleep(0.01)

    def sent_to(self, session: Any, count: int, timeout: float = 5.0) -> None:
        """Wait until `session` has received `count` messages of this job (they reached the viewer's socket)."""
        deadline = time.monotonic() + timeout
        while session.messages_received() < count:
            assert time.monotonic() < deadline, f"{session.messages_received()} messages arrived, expected {count}"
            time.sleep(0.01)

    def send(self, message: LiveMessage) -> None:
        self.send_raw(encode(message))

    def send_raw(self, line: str) -> None:
        with self._lock:
            for conn in self._viewers:
                with suppress(OSError):
                    conn.sendall(line.encode())

    def bye(self, reason: str = "interpreter exit") -> None:
        self.send(JobBye(t=self.now(), reason=reason))
        self.close()

    def close(self) -> None:
        with suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes accept(); close() alone does not
        with suppress(OSError):
            self._server.close()
        with self._lock:
            for conn in self._viewers:
                with suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._viewers.clear()
        self._thread.join(2)


def at(message: LiveMessage, job: FakeJob) -> LiveMessage:
    """The message stamped with the fake job's clock now."""
    return replace(message, t=job.now())  # type: ignore[type-var]


# A training-like job: a DataLoader over MODE data with 2 workers, iterated slowly (the main process "trains" 20 ms
# a batch), epoch after epoch, without loadertop.watch. MODE: dicts (a list of dicts: copy-on-read growth in the
# workers), numpy (the same numbers in one array: flat workers), or none (no DataLoader at all).
JOB_SCRIPT = r"""
import sys, time
mode, n = sys.argv[1], int(sys.argv[2])
if mode == "none":
    print("ready", flush=True)
    time.sleep(120)
    sys.exit(0)
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
torch.set_num_threads(1)

class Dicts(Dataset):
    def __init__(self):
        self.rows = [{"x": i, "y": float(i), "label": i % 10} for i in range(n)]
    def __len__(self):
        return n
    def __getitem__(self, i):
        row = self.rows[i]
        return row["x"] + row["label"]

class Arrays(Dataset):
    def __init__(self):
        self.rows = np.stack([np.arange(n), np.arange(n) % 10], axis=1)
    def __len__(self):
        return n
    def __getitem__(self, i):
        return int(self.rows[i, 0] + self.rows[i, 1])

data = Dicts() if mode == "dicts" else Arrays()
loader = DataLoader(data, batch_size=1000, num_workers=2, collate_fn=len, prefetch_factor=2)
first = True
while True:
    for batch in loader:
        if first:
            print("ready", flush=True)
            first = False
        time.sleep(0.02)
"""


@contextmanager
def loader_jobs(*modes: str, n: int = 200_000) -> Iterator[list[subprocess.Popen[str]]]:
    """Run JOB_SCRIPT once per mode, side by side, until each loop runs (or it is ready without a loader); kill
    them and their workers after."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", JOB_SCRIPT, mode, str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for mode in modes
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", f"job did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        yield procs
    finally:
        for proc in procs:
            kill_tree(proc)


@contextmanager
def loader_job(mode: str = "numpy", n: int = 200_000) -> Iterator[subprocess.Popen[str]]:
    with loader_jobs(mode, n=n) as (proc,):
        yield proc


def kill_tree(proc: subprocess.Popen[str]) -> None:
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        children = []
    proc.kill()
    proc.wait(10)
    for child in children:
        with suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(children, timeout=5)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()

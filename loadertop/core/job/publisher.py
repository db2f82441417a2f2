"""The training job's publisher: one per process, started by the first `loadertop.watch()` (or `tune()`).

It owns the job folder (`jobs_root()/<pid>`, mode 0700: job.json, the Unix socket `sock`, tune.jsonl) and one
daemon thread that, every 0.5 s, drains each watched loader's StepRecorder, turns the raw step records into
messages (sums and percentiles are computed here, never in the training loop) and writes them to every viewer.

Nothing here may hurt the job: a failure is logged once and loadertop steps aside (publisher() returns None,
watch() iterates plainly); send() never blocks and never raises; a forked child (a DataLoader worker) drops the
publisher it inherited and never publishes.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Protocol

from loadertop.core.job.fanout import Fanout
from loadertop.core.model.jobs import JOB_FILE, SOCKET_FILE, TUNE_FILE, job_dir, kept_trace, remove_job_dir
from loadertop.core.model.live_protocol import (
    LIVE_PROTOCOL_VERSION,
    JobBye,
    JobHello,
    LiveMessage,
    TuneChose,
    TuneStep,
    encode,
)
from loadertop.core.model.version import VERSION

log = logging.getLogger("loadertop.watch")

TICK_S = 0.5  # how often step records are drained and sent
HISTORY = 600  # messages a viewer that attaches late gets before the live ones
_BYE_FLUSH_S = 0.5  # at exit: how long the last messages may take to reach viewers


class Drainable(Protocol):
    def drain(self, now: float) -> list[LiveMessage]: ...


class Publisher:
    """The job folder, its socket and the thread that feeds viewers. Build it with publisher()."""

    def __init__(self, root: Path | None = None) -> None:
        self.pid = os.getpid()
        self._t0 = time.monotonic()
        self.folder = job_dir(self.pid, root)
        self.hello = JobHello(
            version=LIVE_PROTOCOL_VERSION,
            pid=self.pid,
            argv=tuple(sys.argv),
            started=time.time(),
            hostname=socket.gethostname(),
            loadertop=VERSION,
        )
        self._recorders: list[Drainable] = []
        self._outbox: deque[bytes] = deque(maxlen=10_000)  # lines from other threads, for the publisher thread
        self._history: deque[bytes] = deque(maxlen=HISTORY)
        self._loaders = 0
        self._lock = threading.Lock()  # new_loader and the trace file; never taken on the hot path
        self._stop = threading.Event()
        self.failed = False
        self._bye_reason = "exit"
        self._make_folder()
        try:
            self._listener, self._wake_r, self._wake_w = _open_sockets(self.folder / SOCKET_FILE)
        except OSError:
            remove_job_dir(self.folder)  # no half-made job folder left for `loadertop attach` to list
            raise
        self._fanout = Fanout(self._listener, self._wake_r)
        self._thread = threading.Thread(target=self._run, name="loadertop-publisher", daemon=True)
        self._thread.start()

    # -- the API (any thread) -------------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self._t0

    def new_loader(self) -> int:
        with self._lock:
            self._loaders += 1
            return self._loaders - 1

    def add_recorder(self, recorder: Drainable) -> None:
        self._recorders.append(recorder)  # list.append is atomic; the thread iterates a copy

    def send(self, message: LiveMessage) -> None:
        try:
            self._outbox.append(encode(message).encode())
            self._wake_w.send(b"x")
        except Exception:  # BlockingIOError (wake-up pipe full: the thread is awake anyway), closed, encode bug
            pass

    def append_trace(self, message: TuneStep | TuneChose) -> None:
        self.send(message)
        try:
            with self._lock, open(self.folder / TUNE_FILE, "a") as trace:
                trace.write(encode(message))
        except Exception as exc:
            _log_once(f"cannot write {self.folder / TUNE_FILE}: {exc}")

    @property
    def alive(self) -> bool:
        return not self.failed and not self._stop.is_set() and self._thread.is_alive()

    def close(self, reason: str = "exit") -> None:
        """Send JobBye, stop the thread, close the socket and remove the folder. Idempotent; only the process
        that made the publisher does anything (a forked child that exits must not remove its parent's folder)."""
        if os.getpid() != self.pid or self._stop.is_set():
            return
        self._bye_reason = reason
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self._release()

    # -- the thread --------------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            next_tick = time.monotonic() + TICK_S
            while not self._stop.is_set():
                self._fanout.poll(max(0.0, next_tick - time.monotonic()))
                self._welcome()
                self._take_outbox()
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + TICK_S
                    self._drain()
            self._drain()
            self._take_outbox()
            bye = JobBye(t=self.now(), reason=self._bye_reason)
            self._publish(encode(bye).encode(), keep=False)
            deadline = time.monotonic() + _BYE_FLUSH_S
            while not self._fanout.flush_all() and time.monotonic() < deadline:
                self._fanout.poll(0.05)
        except Exception as exc:
            _log_once(f"the publisher thread failed ({type(exc).__name__}: {exc}); watching stops")
            self._release()
            self.failed = True  # only now: whoever sees it not alive finds its folder gone too

    def _welcome(self) -> None:
        for viewer in self._fanout.joined:
            self._fanout.queue(viewer, [encode(self.hello).encode(), *self._history])
        self._fanout.joined.clear()

    def _take_outbox(self) -> None:
        while self._outbox:
            self._publish(self._outbox.popleft())

    def _drain(self) -> None:
        now = self.now()
        for recorder in list(self._recorders):
            for message in recorder.drain(now):
                self._publish(encode(message).encode())
            if getattr(recorder, "done", False):  # a loader the job dropped (some make one per epoch)
                self._recorders.remove(recorder)

    def _publish(self, line: bytes, keep: bool = True) -> None:
        if keep:
            self._history.append(line)
        self._fanout.broadcast(line)

    # -- setting up and tearing down --------------------------------------------------------------------------

    def _make_folder(self) -> None:
        root = self.folder.parent
        if not root.is_dir():
            root.mkdir(mode=0o700, parents=True)
        if self.folder.exists():  # a folder left by an earlier process with this pid (killed, or pid reuse)
            remove_job_dir(self.folder)
        self.folder.mkdir(mode=0o700)
        self.folder.chmod(0o700)  # mkdir's mode is masked by the umask; the folder is what keeps others out
        tmp = self.folder / (JOB_FILE + ".tmp")
        tmp.write_text(encode(self.hello))
        tmp.replace(self.folder / JOB_FILE)  # readers never see half a job.json

    def _release(self) -> None:
        with contextlib.suppress(Exception):
            self._fanout.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()
        with contextlib.suppress(OSError):
            (self.folder / (JOB_FILE + ".tmp")).unlink()
        with contextlib.suppress(OSError):  # tune's trace outlives the job, beside the job folders
            (self.folder / TUNE_FILE).replace(kept_trace(self.folder.parent, self.pid, self.hello.started))
        remove_job_dir(self.folder)

    def _drop_in_child(self) -> None:
        # A forked child holds copies of our sockets: close them, or a viewer would not see EOF when we close ours.
        # Close the fds only: unregistering from the selector would change the parent's (shared) epoll set.
        self._fanout.close_fds()
        for sock in (self._listener, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()
        self._stop.set()  # makes close() a no-op in the child too (it also checks the pid)


def _open_sockets(path: Path) -> tuple[socket.socket, socket.socket, socket.socket]:
    if len(os.fsencode(path)) > 107:
        raise OSError(f"socket path too long for a Unix socket ({len(os.fsencode(path))} bytes): {path}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        os.chmod(path, 0o600)
        listener.listen(16)
        listener.setblocking(False)
        wake_r, wake_w = socket.socketpair()
    except OSError:
        listener.close()
        raise
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    return listener, wake_r, wake_w


# -- the process's one publisher -----------------------------------------------------------------------------------


class _Process:
    pub: Publisher | None = None
    failed = False  # it could not start, or its thread died: step aside until reset()
    child = False  # a forked child of the job (a DataLoader worker): never publish


_start_lock = threading.Lock()
_logged: set[str] = set()


def enabled() -> bool:
    return os.environ.get("LOADERTOP_WATCH", "1").strip().lower() not in ("0", "false", "no", "off")


def publisher() -> Publisher | None:
    """The process's one publisher, started on first call. None when it cannot start (logged once), when it has
    failed since, in a forked child, or when LOADERTOP_WATCH=0."""
    pub = _Process.pub
    if pub is not None and pub.alive:
        return pub if enabled() else None
    if _Process.failed or _Process.child or not enabled():
        return None
    with _start_lock:
        pub = _Process.pub
        if pub is not None:
            if pub.alive:
                return pub
            _Process.failed = True  # its thread died (already logged): step aside for good
            return None
        try:
            pub = Publisher()
        except Exception as exc:
            _Process.failed = True
            _log_once(f"cannot publish this job ({type(exc).__name__}: {exc}); loadertop.watch steps aside")
            return None
        _Process.pub = pub
        atexit.register(pub.close)
        return pub


def reset() -> None:
    """Close the process's publisher and forget any failure: the next publisher() starts afresh (tests use it,
    and so may a job that changes LOADERTOP_JOBS_DIR)."""
    pub = _Process.pub
    if pub is not None:
        pub.close("reset")
        atexit.unregister(pub.close)
    _Process.pub = None
    _Process.failed = False
    _logged.clear()


def _log_once(text: str) -> None:
    if text.split(" (")[0] not in _logged:
        _logged.add(text.split(" (")[0])
        log.warning("loadertop: %s", text)


def _after_fork_in_child() -> None:
    # The child of a watched job (a DataLoader worker) never publishes; the child of a process that publishes
    # nothing (a launcher forking its trainers) may start its own publisher.
    pub = _Process.pub
    if pub is not None:
        with contextlib.suppress(Exception):
            pub._drop_in_child()
        _Process.child = True
    _Process.pub = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

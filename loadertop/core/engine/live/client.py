"""The viewer's end of a job's Unix socket: the JobHello is read and checked at once (a wrong version is one
AttachError line), then a daemon thread decodes the lines into messages for the session to drain."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from loadertop.core.engine.live.target import AttachError
from loadertop.core.model.live_protocol import JobBye, JobHello, LiveMessage, decode
from loadertop.core.model.wire import ProtocolError

HELLO_TIMEOUT_S = 5.0
MAX_PENDING = 100_000  # messages not yet drained (a viewer that stopped draining must not grow without bound)


class JobClient:
    """Connected to one job. `drain()` hands over what arrived (with arrival times); `ended` says why the stream
    stopped (None while it runs)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(HELLO_TIMEOUT_S)
            self._sock.connect(str(path))
            self._file = self._sock.makefile("rb")
            self.hello = self._read_hello(path)
        except PermissionError:
            self._sock.close()
            raise AttachError(f"{path}: loadertop may not read this job's socket (another user's job?)") from None
        except OSError as exc:
            self._sock.close()
            raise AttachError(f"{path}: cannot connect to the job ({exc.strerror or exc})") from None
        except AttachError:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._lock = threading.Lock()
        self._pending: deque[tuple[float, LiveMessage]] = deque(maxlen=MAX_PENDING)
        self.bye: JobBye | None = None
        self.received = 0  # messages arrived since the hello (a viewer can wait for the ones it expects)
        self.ended: str | None = None
        self.error: str | None = None  # a bad line mid-stream: the stream stops there
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loadertop-attach-socket", daemon=True)
        self._thread.start()

    def _read_hello(self, path: Path) -> JobHello:
        line = self._file.readline()
        if not line:
            raise AttachError(f"{path}: the job closed the connection before saying hello")
        try:
            message = decode(line)
        except ProtocolError as exc:
            raise AttachError(f"{path}: {exc}") from None
        if not isinstance(message, JobHello):
            raise AttachError(f"{path}: the job's first message is {message.TYPE!r}, not its hello")
        return message

    def _run(self) -> None:
        try:
            for line in self._file:
                if not line.strip():
                    continue
                message = decode(line)
                with self._lock:
                    self._pending.append((self._clock(), message))
                    self.received += 1
                if isinstance(message, JobBye):
                    self.bye = message
        except ProtocolError as exc:
            self.error = f"the job sent a line this loadertop cannot read: {exc}"
        except (OSError, ValueError):  # closed under us by close(), or the connection reset
            pass
        if self.bye is not None:
            self.ended = f"the job said goodbye ({self.bye.reason})"
        elif self.error is not None:
            self.ended = self.error
        else:
            self.ended = "the job's socket closed"

    def drain(self) -> list[tuple[float, LiveMessage]]:
        with self._lock:
            items = list(self._pending)
            self._pending.clear()
        return items

    def close(self) -> None:
        """Idempotent: shut the socket (which ends the reader's blocking read) and join the thread."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        if threading.current_thread() is not self._thread:
            self._thread.join(2.0)
        with contextlib.suppress(OSError, ValueError):
            self._file.close()

"""The publisher's socket side: accept viewers on a listening Unix socket and write each of them the same lines,
without ever blocking (non-blocking sockets, one bounded buffer per viewer that drops its oldest lines).

Used only from the publisher's thread; nothing here is thread-safe.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import threading
from collections import deque

VIEWER_BUFFER = 2000  # lines a viewer may lag behind before its oldest are dropped
_SEND_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0)  # a viewer gone mid-write: EPIPE, never SIGPIPE


class _Viewer:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lines: deque[bytes] = deque(maxlen=VIEWER_BUFFER)
        self.partial = memoryview(b"")  # the rest of a line under way: never dropped, so lines stay whole
        self.dropped = 0


# Held while a viewer's socket joins or leaves the list that a forked child closes (Fanout.close_fds); a fork waits
# for it (os.register_at_fork), so no DataLoader worker is born holding a viewer's socket the list does not name.
_NO_FORK = threading.Lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_NO_FORK.acquire, after_in_parent=_NO_FORK.release, after_in_child=_NO_FORK.release)


class Fanout:
    """Viewers of one listening socket. `poll(timeout)` waits for sockets, accepts, reads EOFs and writes."""

    def __init__(self, listener: socket.socket, wakeup: socket.socket) -> None:
        self._listener = listener
        self._wakeup = wakeup  # readable when another thread wants the loop to look at its outbox
        self._viewers: dict[int, _Viewer] = {}
        self._sel = selectors.DefaultSelector()
        self._sel.register(listener, selectors.EVENT_READ, "listen")
        self._sel.register(wakeup, selectors.EVENT_READ, "wakeup")
        self.joined: list[_Viewer] = []  # accepted since the caller last looked: they need hello + history

    def poll(self, timeout: float) -> None:
        for key, events in self._sel.select(timeout):
            if key.data == "listen":
                self._accept()
            elif key.data == "wakeup":
                with contextlib.suppress(OSError):
                    self._wakeup.recv(4096)
            else:
                viewer = self._viewers.get(key.fd)
                if viewer is None:
                    continue
                if events & selectors.EVENT_READ:
                    self._read(viewer)
                if events & selectors.EVENT_WRITE and key.fd in self._viewers:
                    self._flush(viewer)

    def queue(self, viewer: _Viewer, lines: list[bytes]) -> None:
        for line in lines:
            if len(viewer.lines) == viewer.lines.maxlen:
                viewer.dropped += 1
            viewer.lines.append(line)
        self._flush(viewer)

    def broadcast(self, line: bytes) -> None:
        for viewer in list(self._viewers.values()):
            self.queue(viewer, [line])

    def flush_all(self) -> bool:
        """Write what each viewer can take now; True when every buffer is empty."""
        for viewer in list(self._viewers.values()):
            self._flush(viewer)
        return all(not v.lines and not v.partial for v in self._viewers.values())

    def close(self) -> None:
        for viewer in list(self._viewers.values()):
            self._forget(viewer)
        with contextlib.suppress(Exception):
            self._sel.close()

    def close_fds(self) -> None:
        """In a forked child: close our copies of the viewers' sockets and of the selector, touching nothing the
        parent shares (an epoll unregister would act on the parent's set)."""
        for viewer in self._viewers.values():
            with contextlib.suppress(OSError):
                viewer.sock.close()
        with contextlib.suppress(Exception):
            self._sel.close()
        self._viewers.clear()

    def _accept(self) -> None:
        with _NO_FORK:  # a worker forked between accept() and the list would keep the viewer's socket open
            try:
                sock, _ = self._listener.accept()
            except OSError:  # the client left before we took it
                return
            viewer = _Viewer(sock)
            self._viewers[sock.fileno()] = viewer
        sock.setblocking(False)
        self._sel.register(sock, selectors.EVENT_READ, "viewer")
        self.joined.append(viewer)

    def _read(self, viewer: _Viewer) -> None:
        try:
            data = viewer.sock.recv(4096)  # viewers send nothing we use; EOF means they left
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._forget(viewer)

    def _flush(self, viewer: _Viewer) -> None:
        try:
            while True:
                if not viewer.partial:
                    if not viewer.lines:
                        break
                    viewer.partial = memoryview(viewer.lines.popleft())
                sent = viewer.sock.send(viewer.partial, _SEND_FLAGS)
                viewer.partial = viewer.partial[sent:]
        except BlockingIOError:
            pass
        except OSError:  # gone: EPIPE, ECONNRESET
            self._forget(viewer)
            return
        waiting = bool(viewer.partial or viewer.lines)
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if waiting else 0)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.modify(viewer.sock, events, "viewer")

    def _forget(self, viewer: _Viewer) -> None:
        fd = viewer.sock.fileno()
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(viewer.sock)
        with _NO_FORK:  # nor between leaving the list and close(): the child's copy would outlive ours
            self._viewers.pop(fd, None)
            with contextlib.suppress(OSError):
                viewer.sock.close()
        if viewer in self.joined:
            self.joined.remove(viewer)

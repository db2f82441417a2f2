"""A shared store for tests and benchmarks: an HTTP server over one folder whose bandwidth cap is SHARED by every
connection, so nodes (and their workers) that read at once contend for it, as they do for a real shared store.

    with capped_server(folder, bytes_per_s=20e6) as url:   # url = "http://127.0.0.1:PORT"
        ...  # GET url/NAME serves folder/NAME; GET url/ lists the files, one name a line

Run by hand for a many-node try on one machine: `python tests/shard_server.py FOLDER --mb-per-s 20 [--port P]`.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHUNK = 16 * 1024  # bytes a connection sends per turn: small, so readers at once interleave


class SharedCap:
    """A bandwidth cap for every connection together. Each chunk books the next free slot of the one link (a virtual
    clock advanced by size ÷ rate) and sleeps until its slot ends: two readers at once get half each."""

    def __init__(self, bytes_per_s: float) -> None:
        if bytes_per_s <= 0:
            raise ValueError(f"bytes_per_s must be positive, got {bytes_per_s}")
        self.rate = float(bytes_per_s)
        self._lock = threading.Lock()
        self._free_at = time.monotonic()
        self.sent = 0

    def take(self, n: int) -> None:
        with self._lock:
            now = time.monotonic()
            # An idle link does not bank bandwidth: no burst after a pause.
            self._free_at = max(self._free_at, now) + n / self.rate
            done = self._free_at
            self.sent += n
        delay = done - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def _handler(folder: Path, cap: SharedCap) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a worker may reuse its connection

        def do_GET(self) -> None:
            self._serve(body=True)

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def _serve(self, body: bool) -> None:
            name = self.path.split("?", 1)[0].lstrip("/")
            if name == "":
                data = "".join(f"{p.name}\n" for p in sorted(folder.iterdir()) if p.is_file()).encode()
                self._send(200, len(data), "text/plain")
                if body:
                    self.wfile.write(data)
                return
            path = folder / name
            if "/" in name or name.startswith(".") or not path.is_file():  # only the folder's own files
                self._send(404, 0, "text/plain")
                return
            size = path.stat().st_size
            self._send(200, size, "application/octet-stream")
            if body:
                with path.open("rb") as f:
                    while chunk := f.read(CHUNK):
                        cap.take(len(chunk))
                        self.wfile.write(chunk)

        def _send(self, code: int, length: int, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(length))
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass  # a line per request would drown a test's output

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a reader that hangs up mid-file never holds the shutdown
    block_on_close = False

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a reader that went away mid-file (a trial stopped) is normal here


@contextmanager
def capped_server(folder: Path, bytes_per_s: float, port: int = 0) -> Iterator[str]:
    """Serve `folder`'s files at http://127.0.0.1:PORT with one bandwidth cap for all connections; yields the base
    URL; stops (and closes its socket) on exit. `server_cap(url)` gives the cap, for tests that read its count."""
    cap = SharedCap(bytes_per_s)
    server = _Server(("127.0.0.1", port), _handler(Path(folder), cap))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    _CAPS[url] = cap
    try:
        yield url
    finally:
        _CAPS.pop(url, None)
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


_CAPS: dict[str, SharedCap] = {}


def server_cap(url: str) -> SharedCap:
    return _CAPS[url]


def make_shards(folder: Path, count: int, size: int, prefix: str = "shard") -> list[str]:
    """`count` files of `size` bytes each (distinct content), named prefix-000000.bin ...; returns the names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        name = f"{prefix}-{i:06d}.bin"
        (folder / name).write_bytes(bytes([i % 251]) * size)
        names.append(name)
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--mb-per-s", type=float, default=20.0, help="the cap shared by every connection (MB/s)")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    if not args.folder.is_dir():
        raise SystemExit(f"shard_server: {args.folder} is not a folder")
    with capped_server(args.folder, args.mb_per_s * 1e6, args.port) as url:
        print(f"serving {args.folder} at {url}, {args.mb_per_s:g} MB/s shared; Ctrl-C stops", flush=True)
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()

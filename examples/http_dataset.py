"""A dataset read over HTTP, as from a shared object store: every sample is one GET, so workers on every node contend
for the store's bandwidth (tests/shard_server.py is such a store with a shared cap).

    loadertop --dataset examples/http_dataset.py:build --dataset-arg url=http://127.0.0.1:8765

Options (`--dataset-arg k=v`): `url` (the store; `url/` lists its files, one name a line), `files` (names to read,
`+`-separated; default: every file the listing gives), `samples` (dataset length; default: one pass over the files).
Sample i is file i mod len(files), returned whole as a uint8 tensor (files of one size batch as they are), label i.
"""

from __future__ import annotations

import http.client
import os
import urllib.parse
import urllib.request
from typing import Any

import torch
from torch.utils.data import Dataset

TIMEOUT_S = 30.0


class HttpFiles(Dataset[tuple[torch.Tensor, int]]):
    """Map-style: works with a DistributedSampler (each rank its share) and with any number of workers. Each worker
    keeps one connection to the store (opened on its first read: connections do not survive a fork)."""

    def __init__(self, url: str, files: list[str], samples: int) -> None:
        self.url = url.rstrip("/")
        self.files = files
        self.samples = samples
        self._conn: http.client.HTTPConnection | None = None
        self._pid = os.getpid()

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        data = self._get(self.files[index % len(self.files)])
        return torch.frombuffer(bytearray(data), dtype=torch.uint8), index

    def _get(self, name: str) -> bytes:
        parts = urllib.parse.urlsplit(self.url)
        path = f"{parts.path}/{urllib.parse.quote(name)}"
        if self._pid != os.getpid():  # a forked worker: the parent's socket is not its own
            self._conn, self._pid = None, os.getpid()
        for attempt in (0, 1):  # a kept-alive connection the server closed: reconnect once
            if self._conn is None:
                self._conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=TIMEOUT_S)
            try:
                self._conn.request("GET", path)
                response = self._conn.getresponse()
                data = response.read()
            except (http.client.HTTPException, OSError):
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
                continue
            if response.status != 200:
                raise OSError(f"GET {self.url}/{name}: HTTP {response.status}")
            return data
        raise AssertionError("unreachable")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_conn": None}  # spawn workers open their own


def build(url: str, files: str = "", samples: str = "0") -> HttpFiles:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"url must be http://HOST:PORT, got {url!r}")
    names = [f for f in files.split("+") if f] or _listing(url)
    if not names:
        raise ValueError(f"{url} lists no files")
    return HttpFiles(url, names, int(samples) or len(names))


def _listing(url: str) -> list[str]:
    with urllib.request.urlopen(url.rstrip("/") + "/", timeout=TIMEOUT_S) as response:
        return [line.strip() for line in response.read().decode().splitlines() if line.strip()]

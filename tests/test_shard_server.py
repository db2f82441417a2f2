"""The capped store every node's workers read from in the many-node tests: one cap for all connections (the
contention is the point), files served as they are, stops cleanly; and the HTTP dataset factory reading it through a
real DataLoader with worker processes."""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from shard_server import capped_server, make_shards, server_cap
from torch.utils.data import DataLoader

from loadertop.core.datasets.spec import load_dataset

EXAMPLE = Path(__file__).parent.parent / "examples" / "http_dataset.py"
RATE = 4e6  # bytes/s, shared
SIZE = 1_000_000


def read(url: str, progress: list[int], done: list[float]) -> None:
    with urllib.request.urlopen(url, timeout=30) as response:
        while chunk := response.read(16384):
            progress[0] += len(chunk)
    done.append(time.monotonic())


@pytest.mark.unit
def test_one_reader_is_held_to_the_cap(tmp_path: Path) -> None:
    make_shards(tmp_path, 1, SIZE)
    with capped_server(tmp_path, RATE) as url:
        start = time.monotonic()
        with urllib.request.urlopen(f"{url}/shard-000000.bin", timeout=30) as response:
            data = response.read()
        elapsed = time.monotonic() - start
        assert server_cap(url).sent == SIZE
    assert data == bytes([0]) * SIZE
    assert elapsed >= 0.9 * SIZE / RATE  # never faster than the cap (sleeps only lengthen it)


@pytest.mark.unit
def test_two_readers_at_once_share_the_cap(tmp_path: Path) -> None:
    make_shards(tmp_path, 2, SIZE)
    with capped_server(tmp_path, RATE) as url:
        progress = [[0], [0]]
        done: list[list[float]] = [[], []]
        threads = [
            threading.Thread(target=read, args=(f"{url}/shard-{i:06d}.bin", progress[i], done[i])) for i in (0, 1)
        ]
        start = time.monotonic()
        for t in threads:
            t.start()
        # when the first reader ends, the other must have had about as much: the cap was shared, not first-come
        while not (done[0] or done[1]):
            time.sleep(0.005)
        other = progress[1][0] if done[0] else progress[0][0]
        for t in threads:
            t.join(timeout=30)
        elapsed = time.monotonic() - start
    # First come, first served would leave the other with next to nothing; shared, it has had about half the time
    # at the cap, and how much of it has reached the reader also depends on when its thread ran (a busy machine).
    assert other >= 0.5 * SIZE
    assert elapsed >= 0.9 * 2 * SIZE / RATE  # together no faster than one cap: each got about half


@pytest.mark.unit
def test_only_the_folders_files_and_a_listing(tmp_path: Path) -> None:
    names = make_shards(tmp_path / "store", 3, 10)
    (tmp_path / "secret").write_text("no")
    with capped_server(tmp_path / "store", RATE) as url:
        listing = urllib.request.urlopen(f"{url}/", timeout=10).read().decode().split()
        assert listing == names
        for bad in ("missing.bin", "../secret", "%2e%2e/secret"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"{url}/{bad}", timeout=10)
            assert err.value.code == 404


@pytest.mark.unit
def test_it_stops_cleanly(tmp_path: Path) -> None:
    make_shards(tmp_path, 1, 10)
    before = threading.active_count()
    with capped_server(tmp_path, RATE) as url:
        port = int(url.rsplit(":", 1)[1])
        urllib.request.urlopen(f"{url}/shard-000000.bin", timeout=10).read()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    with pytest.raises(ConnectionRefusedError):
        conn.request("GET", "/")
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)  # a keep-alive handler thread notices its closed socket
    assert threading.active_count() == before


def test_the_http_dataset_reads_the_store_through_worker_processes(tmp_path: Path) -> None:
    make_shards(tmp_path, 4, 4096)
    with capped_server(tmp_path, 50e6) as url:
        dataset, extra = load_dataset(f"{EXAMPLE}:build", {"url": url, "samples": "10"})
        assert len(dataset) == 10 and extra == {}
        loader = DataLoader(dataset, batch_size=5, num_workers=2, multiprocessing_context="fork")
        batches = list(loader)
        assert server_cap(url).sent == 10 * 4096
    data = torch.cat([b[0] for b in batches])
    labels = torch.cat([b[1] for b in batches]).tolist()
    assert labels == list(range(10))
    assert [int(row[0]) for row in data] == [i % 4 for i in range(10)]  # file i mod 4 holds byte i mod 4


@pytest.mark.unit
def test_the_http_dataset_says_what_is_wrong(tmp_path: Path) -> None:
    from loadertop.core.datasets.errors import SpecError

    with pytest.raises(SpecError, match="url must be http"):
        load_dataset(f"{EXAMPLE}:build", {"url": str(tmp_path)})

"""Many nodes shard the data as the real job would: local rank L of node K reads global rank K × R + L's share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes_procs import ARGS, Nodes, assert_nothing_left, pieces

# A map-style dataset that writes down every index it serves, in a file named after its process's RANK.
RECORDING = """
import os
import torch
from torch.utils.data import Dataset

class Recording(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, index):
        with open(os.path.join({folder!r}, f"rank{{os.environ['RANK']}}-{{os.getpid()}}.txt"), "a") as out:
            out.write(f"{{index}}\\n")
        return torch.zeros(4)

def build():
    return Recording()
"""


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    launched = Nodes(tmp_path)
    yield launched
    launched.kill_all()


def test_two_nodes_of_two_ranks_read_four_disjoint_shares(nodes: Nodes, tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    factory = tmp_path / "recording.py"
    factory.write_text(RECORDING.format(folder=str(served)))
    args = [*ARGS, "--workers", "0", "--ranks", "2", "--dataset", f"{factory}:build"]
    for rank in (1, 0):
        nodes.bare(rank, args, pieces(nodes, rank))
    assert nodes.wait(0, 120) == 0, nodes.err(0)
    assert nodes.wait(1, 30) == 0, nodes.err(1)
    shares: dict[int, set[int]] = {}
    for path in served.glob("rank*-*.txt"):  # the trial's ranks (the runner's own dataset check reads nothing)
        rank = int(path.name[4:].split("-")[0])
        shares.setdefault(rank, set()).update(int(line) for line in path.read_text().split())
    assert sorted(shares) == [0, 1, 2, 3]  # node 0: ranks 0, 1; node 1: ranks 2, 3
    for rank, indices in shares.items():
        assert indices and {i % 4 for i in indices} == {rank}  # DistributedSampler over 4: every 4th from `rank`
    assert_nothing_left(nodes)

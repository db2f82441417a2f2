"""A map-style dataset that records which rank read which index, to check DistributedSampler sharding.

Each process appends `rank index` lines to $LOADERTOP_TEST_RANKS/<pid> (worker processes included).
"""

from __future__ import annotations

import os

import torch
from torch.utils.data import Dataset

from loadertop.core.datasets.synthetic import burn_cpu


class Ranked(Dataset[torch.Tensor]):
    def __init__(self, length: int, cpu_ms: float) -> None:
        self.length = length
        self.cpu_s = cpu_ms / 1000
        self.rank = int(os.environ.get("RANK", "-1"))  # set by loadertop as torchrun would, before the factory runs

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        folder = os.environ.get("LOADERTOP_TEST_RANKS")
        if folder:
            with open(os.path.join(folder, str(os.getpid())), "a") as handle:
                handle.write(f"{self.rank} {index}\n")
        burn_cpu(self.cpu_s)
        return torch.full((1024,), float(index))


def make(length: str = "100000", cpu_ms: str = "2") -> Ranked:
    return Ranked(int(length), float(cpu_ms))


def fails_on_rank_one(length: str = "100000") -> Ranked:
    if os.environ.get("RANK") == "1":
        raise RuntimeError("rank 1 cannot open its shard")
    return Ranked(int(length), 1.0)

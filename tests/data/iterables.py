"""IterableDatasets: one that shards its stream across workers, one that forgets to."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import IterableDataset, get_worker_info

from loadertop.core.datasets.synthetic import burn_cpu


class Stream(IterableDataset[torch.Tensor]):
    def __init__(self, length: int, shard: bool, cpu_ms: float = 0.5) -> None:
        self.length = length
        self.shard = shard
        self.cpu_s = cpu_ms / 1000

    def __iter__(self) -> Iterator[torch.Tensor]:
        start, step = 0, 1
        info = get_worker_info()
        if self.shard and info is not None:
            start, step = info.id, info.num_workers
        for i in range(start, self.length, step):
            burn_cpu(self.cpu_s)
            yield torch.full((256,), float(i))


def sharded(length: str = "1000000") -> Stream:
    return Stream(int(length), shard=True)


def unsharded(length: str = "1000000") -> Stream:
    return Stream(int(length), shard=False)


class _Nothing(IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(())


def empty_stream() -> _Nothing:
    return _Nothing()

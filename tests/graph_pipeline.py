"""A torchdata.nodes pipeline as a dataset factory (tests/test_graph.py): a sampler over a map-style dataset,
a ParallelMapper of thread workers that loads samples, a Batcher, an inline Mapper that collates, a Prefetcher."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset, RandomSampler, default_collate
from torchdata.nodes import Batcher, Mapper, ParallelMapper, Prefetcher, SamplerWrapper


class Squares(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, length: int = 4096, io_ms: float = 0.0) -> None:
        self.length = length
        self.io_ms = io_ms  # a wait per sample that releases the GIL, as reading a file does: threads then help

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.io_ms:
            time.sleep(self.io_ms / 1000)
        return torch.full((16,), float(index)), index * index


def factory(batch_size: str = "32", io_ms: str = "0") -> Prefetcher:
    dataset = Squares(io_ms=float(io_ms))
    node = SamplerWrapper(RandomSampler(dataset))
    node = ParallelMapper(node, dataset.__getitem__, num_workers=2, method="thread")
    node = Batcher(node, batch_size=int(batch_size))
    node = Mapper(node, default_collate)
    return Prefetcher(node, prefetch_factor=2)

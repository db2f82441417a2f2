"""A dataset whose workers keep what they load: each sample leaves `kb` KB of touched bytes in the worker that
built it, so every worker's USS climbs steadily as it works (a cache that is never bounded: the shape of a leak).

loadertop --dataset tests/data/growing.py:build --workers 2
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class Growing(Dataset[torch.Tensor]):
    def __init__(self, kb: int, ms: float) -> None:
        self.kb, self.sleep_s = kb, ms / 1e3
        self.kept: list[bytes] = []  # per process: each worker fills its own copy-on-write list

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        self.kept.append(bytes([index % 251 + 1]) * (self.kb * 1024))  # written, so its pages are resident
        return torch.full((64,), float(index))


def build(kb: str = "48", ms: str = "4") -> Growing:
    return Growing(int(kb), float(ms))

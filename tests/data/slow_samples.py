"""A dataset with occasional slow samples: every `every`-th sample sleeps `slow_ms` (a cold read, a corrupt file
retried, a large image), the rest cost `fast_ms`. In order, a worker stuck on a slow sample holds up the batches
the others have ready; with in_order=False they are handed out as they finish. Its data wait has a long tail.

loadertop --dataset tests/data/slow_samples.py:build --in-order on,off --workers 2,4
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class SlowSamples(Dataset[torch.Tensor]):
    def __init__(self, length: int, every: int, slow_ms: float, fast_ms: float) -> None:
        self.length, self.every, self.slow_s, self.fast_s = length, every, slow_ms / 1e3, fast_ms / 1e3

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.slow_s if index % self.every == self.every - 1 else self.fast_s)
        return torch.full((256,), float(index))


def build(length: str = "100000", every: str = "50", slow_ms: str = "50", fast_ms: str = "1") -> SlowSamples:
    return SlowSamples(int(length), int(every), float(slow_ms), float(fast_ms))

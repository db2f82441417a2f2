"""A dataset whose transform is torch compute (a conv per sample), and a small conv-net training step.

`build(record=DIR)`: each DataLoader worker writes `DIR/<pid>` holding torch.get_num_threads() as it loads, so a
test can see how many intra-op threads every worker really had."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, get_worker_info

_KERNEL = torch.randn(3, 3, 5, 5) / 75


class ConvSamples(Dataset[torch.Tensor]):
    def __init__(self, length: int, size: int, record: str) -> None:
        self.length, self.size, self.record = length, size, record

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.record and get_worker_info() is not None:
            with open(os.path.join(self.record, str(os.getpid())), "w") as handle:
                handle.write(str(torch.get_num_threads()))
        image = torch.randn(1, 3, self.size, self.size, generator=torch.Generator().manual_seed(index))
        return F.conv2d(image, _KERNEL, padding=2)[0]  # the transform: torch compute, threaded per torch's count


def build(length: str = "4096", size: str = "96", record: str = "") -> Any:
    return ConvSamples(int(length), int(size), record)


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(x, 2)
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.head(x.mean(dim=(2, 3)))


_net = _Net()
_opt = torch.optim.SGD(_net.parameters(), lr=0.01)


def conv_step(batch: Any) -> None:
    """A small conv-net training step (forward, backward, SGD) at torch's default thread count."""
    x = batch[0] if isinstance(batch, list | tuple) else batch
    _opt.zero_grad()
    loss = _net(x).square().mean()
    loss.backward()
    _opt.step()

"""A `file.py:callable` dataset factory that returns a torchdata StatefulDataLoader: shuffle=True and a collate_fn
of its own, which writes down, once per process, whether a StatefulDataLoader called it (and from a worker or not).

loadertop --dataset tests/data/stateful_factory.py:make --dataset-arg record=/tmp/calls
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch.utils.data import Dataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

RECORD = ""  # the folder a call is written to ("": none); workers inherit it (fork) or the factory sets it again
_WRITTEN = False


class Rows(Dataset[torch.Tensor]):
    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((16,), float(index))


def collate_rows(samples: list[torch.Tensor]) -> torch.Tensor:
    global _WRITTEN
    if RECORD and not _WRITTEN:
        _WRITTEN = True
        frame, stateful = sys._getframe(1), False
        while frame is not None:  # torchdata's own fetch loop (main process or worker) is on the stack
            stateful = stateful or "stateful_dataloader" in frame.f_code.co_filename
            frame = frame.f_back
        where = "worker" if get_worker_info() is not None else "main"
        (Path(RECORD) / str(os.getpid())).write_text(f"{stateful} {where}\n")
    return torch.stack(samples)


def make(record: str = "", length: str = "4000") -> StatefulDataLoader:
    global RECORD
    RECORD = record
    # num_workers and batch_size here are the sweep's to choose: loadertop keeps the rest
    return StatefulDataLoader(Rows(int(length)), batch_size=4, shuffle=True, collate_fn=collate_rows, num_workers=3)

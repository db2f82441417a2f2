"""Factories that say each time they are built (one line appended to `log`), for the build-once tests."""

from __future__ import annotations

import os
import threading
import time

import torch
from PIL import Image
from torch.utils.data import Dataset


class Counted(Dataset[torch.Tensor]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((3, 8, 8), float(i % 5))


def _built(log: str, sleep: str) -> None:
    with open(log, "a") as handle:
        handle.write(f"{os.getpid()}\n")
    time.sleep(float(sleep))


def make(log: str, sleep: str = "0", n: str = "2048") -> Counted:
    _built(log, sleep)
    return Counted(int(n))


def with_thread(log: str, n: str = "2048") -> Counted:
    """Leaves a thread running in the process that built it: not to be forked from."""
    _built(log, "0")
    threading.Thread(target=time.sleep, args=(3600,), name="prefetcher", daemon=True).start()
    return Counted(int(n))


def with_child(log: str, n: str = "2048") -> Counted:
    """Leaves a child process behind (a pool its factory never closed): it must not outlive loadertop."""
    import multiprocessing

    _built(log, "0")
    multiprocessing.get_context("fork").Process(target=time.sleep, args=(3600,), daemon=False).start()
    return Counted(int(n))


class PilLate(Counted):
    """Tensors for the first 8 samples, PIL images after: the check's small first batch passes, every trial fails."""

    def __getitem__(self, i: int) -> torch.Tensor:
        return super().__getitem__(i) if i < 8 else Image.new("RGB", (8, 8))  # type: ignore[return-value]


def pil_late(n: str = "256") -> PilLate:
    return PilLate(int(n))


class Pil(Counted):
    def __getitem__(self, i: int) -> torch.Tensor:
        return Image.new("RGB", (8, 8))  # type: ignore[return-value]


def pil(n: str = "256") -> Pil:
    return Pil(int(n))

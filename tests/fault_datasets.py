"""Datasets that inject faults, loaded by the runner as `tests/fault_datasets.py:<factory>`.

Factories take string keyword arguments (from `--dataset-arg` / `Settings.dataset_args`). `where` says in
which processes the fault fires: "worker" (DataLoader workers only), "main" (the 0-worker main process)
or "both". Never import this module from a test: it imports torch, and the driver process must not.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Any

import torch
from torch.utils.data import Dataset, get_worker_info

_HELD: dict[int, list[bytearray]] = {}  # per process: memory an allocating dataset keeps


def _here(where: str) -> bool:
    in_worker = get_worker_info() is not None
    return where == "both" or (where == "worker") == in_worker


class Faulty(Dataset[torch.Tensor]):
    """Cheap samples (1 ms wait, 4 KiB) with one fault hook."""

    def __init__(self, length: int = 100_000) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def fault(self, index: int) -> None:
        pass

    def __getitem__(self, index: int) -> torch.Tensor:
        self.fault(index)
        time.sleep(0.001)
        return torch.full((1024,), float(index))


class Raising(Faulty):
    def __init__(self, at: int, where: str) -> None:
        super().__init__()
        self.at, self.where = at, where

    def fault(self, index: int) -> None:
        if index == self.at and _here(self.where):
            raise ValueError(f"corrupt record at offset {index * 4096}")


class Hanging(Faulty):
    def __init__(self, after: int, where: str) -> None:
        super().__init__()
        self.after, self.where = after, where

    def fault(self, index: int) -> None:
        if index >= self.after and _here(self.where):
            time.sleep(3600)


class Killed(Faulty):
    """Dies by a signal at sample `at`. With several signals, a loader with n workers takes the n-th, so one
    sweep over 1, 2, 3 workers meets each of them."""

    def __init__(self, at: int, where: str, sigs: list[str]) -> None:
        super().__init__()
        self.at, self.where, self.sigs = at, where, sigs

    def fault(self, index: int) -> None:
        if index != self.at or not _here(self.where):
            return
        info = get_worker_info()
        sig = self.sigs[min(len(self.sigs), info.num_workers if info else 1) - 1]
        if sig == "SEGV":
            ctypes.string_at(0)  # a real segmentation fault, as a broken C extension would cause
        os.kill(os.getpid(), getattr(signal, f"SIG{sig}"))
        time.sleep(5)  # the signal is on its way


class Allocating(Faulty):
    """Each process that loads samples keeps `mb` MiB, touched page by page, `step_mb` per sample
    (all at once when 0); `cap_mb` is a hard stop per process so a broken guard cannot sink the machine."""

    def __init__(self, mb: int, step_mb: int, where: str) -> None:
        super().__init__()
        self.mb, self.step_mb, self.where = mb, step_mb, where

    def fault(self, index: int) -> None:
        if not _here(self.where):
            return
        held = _HELD.setdefault(os.getpid(), [])
        have = sum(len(b) for b in held) >> 20
        if have < self.mb:
            step = min(self.step_mb or self.mb, self.mb - have)
            held.append(bytearray(b"\x01") * (step << 20))


def raising(at: str = "17", where: str = "both") -> Raising:
    return Raising(int(at), where)


def hanging(after: str = "0", where: str = "worker") -> Hanging:
    return Hanging(int(after), where)


def killed(sig: str = "KILL", at: str = "5", where: str = "worker") -> Killed:
    return Killed(int(at), where, [s.strip().upper().removeprefix("SIG") for s in sig.split(",")])


def allocating(mb: str = "256", step_mb: str = "0", where: str = "worker") -> Allocating:
    return Allocating(int(mb), int(step_mb), where)


# -- bad input ---------------------------------------------------------------------------------------------


class _Empty(Dataset[int]):
    def __len__(self) -> int:
        return 0

    def __getitem__(self, index: int) -> int:
        raise IndexError(index)


class _Unpicklable(Faulty):
    def __init__(self) -> None:
        super().__init__()
        self.transform = lambda x: x  # lambdas cannot be pickled for spawn/forkserver workers


def factory_raises() -> Any:
    raise FileNotFoundError("/data/train/index.csv")


def not_a_dataset() -> Any:
    return 42


def empty() -> Any:
    return _Empty()


def unpicklable() -> Any:
    return _Unpicklable()


class _HoldsAFile(Faulty):
    def __init__(self) -> None:
        super().__init__()
        self.handle = open(__file__, "rb")  # noqa: SIM115  # an open file: spawn workers cannot receive it


def holds_a_file() -> Any:
    return _HoldsAFile()

"""Datasets for tests/test_stages.py, built by `loadertop stages` in its child process (file specs:
tests/stage_datasets.py:NAME). Their costs are real: a transform that spins the CPU, a package whose import takes
time (stage_heavy.py), imported inside __getitem__ or before the workers start."""

from __future__ import annotations

import importlib
import time
from typing import Any

import torch
from torch.utils.data import Dataset

SPIN_S = 0.002  # the slow step's CPU time per sample


def spin_cpu(seconds: float) -> None:
    """Burn `seconds` of this thread's CPU time (the same cost however busy the machine is)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Scale:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0


class SlowStep:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        spin_cpu(SPIN_S)
        return x


class Shift:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1.0


class Compose:
    """What torchvision's Compose is to loadertop: a `.transforms` list applied in turn."""

    def __init__(self, transforms: list[Any]) -> None:
        self.transforms = transforms

    def __call__(self, x: Any) -> Any:
        for step in self.transforms:
            x = step(x)
        return x


class Tensors(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, transform: Any = None, length: int = 512) -> None:
        self.transform = transform
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        x = torch.full((3, 16, 16), float(index % 7))
        return (self.transform(x) if self.transform is not None else x), index % 10


class LazyImport(Tensors):
    """Imports stage_heavy (a slow import) inside __getitem__, as code that imports librosa there does."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        import stage_heavy

        stage_heavy.touch()
        return super().__getitem__(index)


def slow_step() -> Tensors:
    return Tensors(Compose([Scale(), SlowStep(), Shift()]))


def lazy(eager: str = "0") -> LazyImport:
    """eager=1: the import done here, before the workers fork (as at the top of the dataset's module)."""
    if eager == "1":
        importlib.import_module("stage_heavy")
    return LazyImport()


class Broken(Tensors):
    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        raise ValueError(f"corrupt sample {index}")


def broken() -> Broken:
    return Broken()


def slow_samples() -> Tensors:
    return Tensors(SlowStep())

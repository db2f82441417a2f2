"""Factories that are wrong in every way a user's can be (each must give one line and exit 2)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset


class Tensors(Dataset[torch.Tensor]):
    def __init__(self, length: int = 1000) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.zeros(8) + index


def raises() -> Any:
    raise FileNotFoundError("/data/train/labels.csv")


def not_a_dataset() -> Any:
    return {"rows": 3}.items()


def empty() -> Any:
    return Tensors(length=0)


def unpicklable() -> Any:
    class Local(Tensors):  # defined inside the factory: spawn workers cannot import it
        pass

    return Local()


def lambda_collate() -> Any:
    return {"dataset": Tensors(), "collate_fn": lambda batch: torch.stack(batch)}


def fixes_batch_size() -> Any:
    return {"dataset": Tensors(), "batch_size": 64}

"""A `file.py:callable` dataset with its own collate_fn: records of a feature vector, a label and an id string.

loadertop --dataset tests/data/collate_ds.py:build --dataset-arg cpu_ms=2
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

from loadertop.core.datasets.synthetic import burn_cpu


class Records(Dataset[dict[str, Any]]):
    def __init__(self, length: int, cpu_ms: float, features: int) -> None:
        self.length = length
        self.cpu_s = cpu_ms / 1000
        self.features = features

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        burn_cpu(self.cpu_s)  # parsing a record
        return {"x": torch.full((self.features,), float(index)), "label": index % 7, "id": f"rec-{index:06d}"}


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack features, tensor of labels, ids as a plain list: not what default_collate would build."""
    return {
        "x": torch.stack([s["x"] for s in samples]),
        "label": torch.tensor([s["label"] for s in samples]),
        "ids": [s["id"] for s in samples],
    }


def build(length: str = "4000", cpu_ms: str = "2", features: str = "1024") -> dict[str, Any]:
    return {"dataset": Records(int(length), float(cpu_ms), int(features)), "collate_fn": collate, "drop_last": True}


def keep_half(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A collate_fn with a visible effect: batches of half the samples (so samples/s = batches/s × bs/2)."""
    return collate(samples[: max(1, len(samples) // 2)])


def build_halving(length: str = "4000", cpu_ms: str = "0.5") -> dict[str, Any]:
    return {"dataset": Records(int(length), float(cpu_ms), 64), "collate_fn": keep_half}

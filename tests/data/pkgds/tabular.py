"""`pkgds.tabular:make`: rows of a feature table, normalised per sample (numpy work, as a tabular pipeline does).

cd tests/data && loadertop --dataset pkgds.tabular:make
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset


class Table(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, rows: int, width: int) -> None:
        self.rows = rows
        self.width = width

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)
        row = rng.standard_normal((64, self.width)).astype(np.float32)
        row = (row - row.mean(axis=0)) / (row.std(axis=0) + 1e-6)  # per-sample normalisation
        return torch.from_numpy(np.ascontiguousarray(row[0])), index % 3


def make(rows: str = "50000", width: str = "512") -> Table:
    return Table(int(rows), int(width))

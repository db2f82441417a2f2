"""Datasets that cost nothing to make, for the transport ceiling: only their batch structure differs.

loadertop --dataset tests/data/transport_shapes.py:f32_224 --workers 0,1,2,4,8 --search grid --trial-seconds 2
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

LENGTH = 4096


class Fixed(Dataset[Any]):
    """Every index returns the same sample: no work at all (collating and the hand-off are what is left)."""

    def __init__(self, sample: Any) -> None:
        self.sample = sample

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> Any:
        return self.sample


def _image(dtype: torch.dtype, side: int) -> Fixed:
    return Fixed((torch.zeros(3, side, side, dtype=dtype), torch.tensor(1)))


def f32_32() -> Fixed:
    return _image(torch.float32, 32)


def f32_224() -> Fixed:
    return _image(torch.float32, 224)


def u8_32() -> Fixed:
    return _image(torch.uint8, 32)


def u8_224() -> Fixed:
    return _image(torch.uint8, 224)


def many_small() -> Fixed:
    """20 small tensors per sample (a dict of features), 20 x 3 x 32 x 32 float32."""
    return Fixed({f"f{i}": torch.zeros(3, 32, 32) for i in range(20)})


def one_big() -> Fixed:
    """The same bytes as many_small, in one tensor."""
    return Fixed({"all": torch.zeros(20, 3, 32, 32)})

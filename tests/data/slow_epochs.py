"""A dataset whose epochs are short next to their boundary: each epoch's fresh workers take `start_s` to start
(a worker_init_fn that sleeps, like opening a database or a shard index), then its samples come quickly.

loadertop --dataset tests/data/slow_epochs.py:build --dataset-arg start_s=0.5
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from loadertop.core.datasets.synthetic import SyntheticDataset


def slow_start(seconds: float, worker_id: int) -> None:
    time.sleep(seconds)


def build(length: str = "120", start_s: str = "0.5", cpu_ms: str = "0.5") -> dict[str, Any]:
    return {
        "dataset": SyntheticDataset(length=int(length), cpu_ms=float(cpu_ms), io_ms=0.0, kb=4),
        "worker_init_fn": partial(slow_start, float(start_s)),
    }

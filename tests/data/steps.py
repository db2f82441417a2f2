"""Consumers for `--consumer`: training steps that take a batch."""

from __future__ import annotations

import os
import time
from typing import Any

import torch

_weights = torch.randn(256, 256)


def matmul_step(batch: Any) -> None:
    """A small CPU 'model': a few matrix products over the batch's first tensor."""
    x = batch[0] if isinstance(batch, list | tuple) else batch
    x = x.reshape(x.shape[0], -1)[:, :256].float()
    for _ in range(20):
        x = torch.tanh(x @ _weights)


def sleepy_step(batch: Any) -> None:
    """20 ms per batch, and a line per call in $LOADERTOP_TEST_STEPS (so a test can see it ran)."""
    time.sleep(0.02)
    path = os.environ.get("LOADERTOP_TEST_STEPS")
    if path:
        with open(path, "a") as handle:
            handle.write(f"{os.getpid()}\n")


not_callable = 42

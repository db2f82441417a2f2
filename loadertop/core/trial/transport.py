"""The transport ceiling's forked half: how many batches the DataLoader can hand over when making them costs nothing.

A null dataset returns the dataset's own sample (taken apart from its first batch: the same tensors, shapes and
dtypes) without work, through the same DataLoader settings (batch size, default collate, pin_memory, fork start).
What remains is collating, the hand-off from workers (shared memory, one file descriptor per tensor) and pinning:
the most batches/s any loader of this batch structure reaches at that worker count. Runs in the ceiling's process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from loadertop.core.model.config import Settings
from loadertop.core.model.protocol import Emit, TransportMeasured

COUNTS = (0, 1, 2, 4, 8)  # worker counts measured, capped by the planned range and usable CPUs x 4
SECONDS_PER_COUNT = 0.5  # timed, after the start-up; a trial budget under 4 s shortens it
MIN_BLOCK_S = 0.05
MANY_BATCHES = 1_000_000  # the null dataset's length in batches: no epoch ends while measuring


class NullDataset(Dataset[Any]):
    """Every index returns the same sample: no work, only the structure."""

    def __init__(self, sample: Any, length: int) -> None:
        self.sample = sample
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        return self.sample


def unbatch(batch: Any, rows: int) -> Any:
    """One sample of a default-collated batch (row 0, copied); ValueError for a part that is not `rows` rows."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 0 or batch.shape[0] != rows:
            raise ValueError(f"a tensor of shape {tuple(batch.shape)} is not {rows} rows")
        return batch[0].clone()
    if isinstance(batch, Mapping):
        return {key: unbatch(value, rows) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(unbatch(value, rows) for value in batch))
    if isinstance(batch, list | tuple):
        if len(batch) == rows and all(isinstance(v, str | bytes) for v in batch):
            return batch[0]  # default collate keeps strings as a list of them
        return type(batch)(unbatch(value, rows) for value in batch)
    raise ValueError(f"a {type(batch).__name__} in the batch is not a collated part")


def tensors_of(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Mapping):
        for value in batch.values():
            yield from tensors_of(value)
    elif isinstance(batch, list | tuple):
        for value in batch:
            yield from tensors_of(value)


def worker_counts(settings: Settings) -> tuple[int, ...]:
    cap = min(max(settings.workers), 4 * len(os.sched_getaffinity(0)))
    return tuple(n for n in COUNTS if n <= cap)


def measure_transport(settings: Settings, batch: Any, batch_size: int, rows: int, emit: Emit) -> None:
    """Emit one TransportMeasured per worker count (and pin_memory value, with CUDA) for this batch."""
    tensors = list(tensors_of(batch))
    batch_mb = sum(t.numel() * t.element_size() for t in tensors) / 2**20
    images = any(t.dtype == torch.float32 and t.dim() >= 4 for t in tensors)  # rows x C x H x W
    pins = settings.pin_memory if torch.cuda.is_available() else (False,)
    try:
        sample = unbatch(batch, rows)
    except ValueError as exc:
        for pin in sorted(set(pins)):
            emit(TransportMeasured(batch_size, 0, pin, None, None, batch_mb, len(tensors), images,
                                   f"not measured: {exc} (a custom collate?)"))  # fmt: skip
        return
    budget = min(SECONDS_PER_COUNT, settings.trial_seconds / 8)
    for pin in sorted(set(pins)):
        for n in worker_counts(settings):
            rate, spread = _batches_per_s(NullDataset(sample, MANY_BATCHES * batch_size), batch_size, n, pin, budget)
            note = f"null dataset: {len(tensors)} tensors, {batch_mb:.1f} MiB per batch, fork start"
            emit(TransportMeasured(batch_size, n, pin, rate, rate * rows, batch_mb, len(tensors), images, note,
                                   spread))  # fmt: skip


def _batches_per_s(
    dataset: NullDataset, batch_size: int, workers: int, pin: bool, budget_s: float
) -> tuple[float, float]:
    """Median batches/s over short blocks once every worker has handed over its first batches, and the spread."""
    from loadertop.core.model.figures import median_of, spread
    from loadertop.core.trial.procs import DieWithParent

    context = "fork" if workers else None
    # Its workers die with this process, as a trial's do (loader.py): a SIGKILL of loadertop and the runner during
    # the ceiling left two of them alive for torch's 5 s watchdog.
    init = DieWithParent(None, direct_child=True) if workers else None
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, pin_memory=pin,
                        multiprocessing_context=context, worker_init_fn=init)  # fmt: skip
    batches = iter(loader)
    try:
        for _ in range(max(2, 2 * workers)):  # start-up: each worker's first prefetched batches
            next(batches)
        rates: list[float] = []
        deadline = time.perf_counter() + budget_s
        while len(rates) < 3 or time.perf_counter() < deadline:
            start, count = time.perf_counter(), 0
            while (elapsed := time.perf_counter() - start) < MIN_BLOCK_S or count < 2:
                next(batches)
                count += 1
            rates.append(count / elapsed)
        return median_of(rates) or 0.0, spread(rates) or 0.0
    finally:
        del batches  # shuts the workers down

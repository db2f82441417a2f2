"""What a batch costs past the 0-worker time: its bytes, the hand-over from a worker to the main process, pin_memory,
and the copy to the GPU where one exists.

The hand-over is measured for real: one worker of a DataLoader over a dataset that returns one real sample again and
again without work (trial/transport.py's NullDataset), collated by the dataset's own collate_fn. What the worker
spends past that collate (timed at 0 workers) is its loop, the batch built in shared memory and pickled: the
worker's side. The main process receiving and unpickling it is the main side. Each side's CPU time is read apart:
the main process's own clock, the worker's from /proc (every thread of it: the queue's feeder thread pickles).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import torch
from torch.utils.data import DataLoader

from loadertop.core.model.stages import Stage
from loadertop.core.trial.transport import MANY_BATCHES, NullDataset, tensors_of

MIN_BATCHES = 5
PIN_REPEATS = 5


def batch_facts(batch: Any) -> tuple[int, tuple[str, ...], int]:
    """(bytes, "dtype shape" of each tensor, bytes of float tensors shaped like images: 4 dimensions or more)."""
    tensors = list(tensors_of(batch))
    total = sum(t.numel() * t.element_size() for t in tensors)
    described = tuple(f"{str(t.dtype).removeprefix('torch.')} {'×'.join(map(str, t.shape))}" for t in tensors)
    images = sum(t.numel() * t.element_size() for t in tensors if t.is_floating_point() and t.dim() >= 4)
    return int(total), described, int(images)


def cpu_seconds(pid: int) -> float:
    """A process's CPU time over all its threads: /proc's schedstat (nanoseconds), else psutil's ticks."""
    try:
        tasks = Path(f"/proc/{pid}/task")
        return sum(int((task / "schedstat").read_text().split()[0]) for task in tasks.iterdir()) / 1e9
    except (OSError, ValueError, IndexError):
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)


def measure_transfer(sample: Any, collate: Callable[[list[Any]], Any], batch_size: int, collate_cpu_s: float,
                     budget_s: float, worker_init: Callable[[int], None]) -> list[Stage]:  # fmt: skip
    """The hand-over from one worker: its side (its CPU per sample, the collate at 0 workers taken out: the collate
    is a stage of its own) as a handoff stage, and the main process's side as a main stage."""
    before = {p.pid for p in psutil.Process().children()}
    loader = DataLoader(NullDataset(sample, MANY_BATCHES * batch_size), batch_size=batch_size, num_workers=1,
                        collate_fn=collate, worker_init_fn=worker_init)  # fmt: skip
    batches = iter(loader)
    try:
        for _ in range(3):  # the worker's start and its first prefetched batches
            next(batches)
        worker = next(p.pid for p in psutil.Process().children() if p.pid not in before)
        wall, cpu, worker_cpu, count = time.perf_counter(), time.process_time(), cpu_seconds(worker), 0
        while count < MIN_BATCHES or time.perf_counter() - wall < budget_s:
            next(batches)
            count += 1
        elapsed = time.perf_counter() - wall
        main = (time.process_time() - cpu) / (count * batch_size)
        sent = max(0.0, (cpu_seconds(worker) - worker_cpu) / (count * batch_size) - collate_cpu_s)
    finally:
        del batches  # its worker goes
    note = f"1 worker, one sample again and again: {count / elapsed:.1f} batches/s of {batch_size}"
    return [
        Stage("transfer: worker side", "transfer", "handoff", sent, sent,
              note + " (the worker's CPU past the collate: its loop, shared memory, pickling)"),
        Stage("transfer: main side", "transfer", "main", main, main, note + " (received and unpickled)"),
    ]  # fmt: skip


def measure_pin(batch: Any, rows: int) -> Stage:
    """pin_memory on every tensor of the batch; not measured where pinning needs an accelerator and none exists
    (the DataLoader then skips it with a warning)."""
    tensors = list(tensors_of(batch))
    try:
        for t in tensors:
            t.pin_memory()
    except RuntimeError as exc:
        return Stage("pin_memory", "pin_memory", "main", None, None, f"no GPU: {exc}".rstrip("."))
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(PIN_REPEATS):
        for t in tensors:
            t.pin_memory()
    per = PIN_REPEATS * rows
    note = "" if torch.cuda.is_available() else "no GPU to copy to"
    return Stage("pin_memory", "pin_memory", "main", (time.perf_counter() - wall) / per,
                 (time.process_time() - cpu) / per, note)  # fmt: skip


def measure_to_device(batch: Any, rows: int) -> Stage:
    """The copy of the batch to the GPU (synchronised), where CUDA is available."""
    if not torch.cuda.is_available():
        return Stage("host to device", "to_device", "main", None, None, "unavailable: no GPU")
    tensors = list(tensors_of(batch))
    for t in tensors:  # the first copy pays the CUDA context
        t.to("cuda")
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(PIN_REPEATS):
        for t in tensors:
            t.to("cuda")
        torch.cuda.synchronize()
    per = PIN_REPEATS * rows
    name = f"host to device ({torch.cuda.get_device_name()})"
    return Stage(name, "to_device", "main", (time.perf_counter() - wall) / per, (time.process_time() - cpu) / per,
                 "from pageable memory, synchronised")  # fmt: skip

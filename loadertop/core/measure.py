"""The measured loop of one trial: start-up apart, skip the prefetch buffer, blocks until stable.

Runs inside a trial process (runner.py). `emit` sends one JSON-able dict to the driver.
"""

from __future__ import annotations

import signal
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from loadertop.core.config import Settings, TrialConfig

Emit = Callable[[dict[str, Any]], None]


def spread(rates: list[float]) -> float:
    """IQR / median: robust to the odd slow block (a GC pause, a page-cache miss)."""
    if len(rates) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(rates, n=4, method="inclusive")
    median = statistics.median(rates)
    return (q3 - q1) / median if median > 0 else 0.0


def warmup_batches(config: TrialConfig, skip: bool) -> int:
    """Batches queued during start-up (prefetch × workers), plus one round per worker to drain them."""
    if not skip:
        return 0
    if config.num_workers == 0:
        return 1
    return (config.prefetch_factor or 2) * config.num_workers + config.num_workers


class Consumer:
    """The training step's stand-in: on CUDA copy the batch and run a fixed-length kernel; else sleep."""

    def __init__(self, step_ms: float, pin_memory: bool) -> None:
        self.step_s = step_ms / 1000
        self.device = None
        self.non_blocking = pin_memory
        import torch

        if torch.cuda.is_available():
            self.device = torch.device("cuda")
            self._cycles_per_s = _calibrate_cuda_sleep() if self.step_s > 0 else 0.0

    def __call__(self, batch: Any) -> None:
        if self.device is None:
            if self.step_s > 0:
                time.sleep(self.step_s)
            return
        import torch

        _to_device(batch, self.device, self.non_blocking)
        if self.step_s > 0:
            torch.cuda._sleep(int(self._cycles_per_s * self.step_s))
        torch.cuda.synchronize()


def _to_device(batch: Any, device: Any, non_blocking: bool) -> Any:
    if hasattr(batch, "to"):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: _to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return [_to_device(v, device, non_blocking) for v in batch]
    return batch


def _calibrate_cuda_sleep() -> float:
    import torch

    cycles = 10_000_000
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    return cycles / max(time.perf_counter() - start, 1e-6)


def batch_size_of(batch: Any, default: int) -> int:
    """Samples in a batch: the leading dimension of its first tensor (a custom collate may differ)."""
    first = batch
    while isinstance(first, list | tuple) and first:
        first = first[0]
    if isinstance(first, dict) and first:
        first = next(iter(first.values()))
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else default


class _ThawFlag:
    """Set by SIGCONT (the driver paused and resumed the trial): the block in progress is discarded."""

    def __init__(self) -> None:
        self.thawed = False
        signal.signal(signal.SIGCONT, self._on_cont)

    def _on_cont(self, signum: int, frame: object) -> None:
        self.thawed = True

    def take(self) -> bool:
        was, self.thawed = self.thawed, False
        return was


def measure(loader: Any, config: TrialConfig, settings: Settings, consumer: Consumer, emit: Emit) -> None:
    started = time.perf_counter()
    deadline = started + settings.trial_seconds
    thaw = _ThawFlag()
    epoch_restart_s: float | None = None

    it: Iterator[Any] = iter(loader)
    emit({"type": "workers", "worker_pids": _worker_pids(it)})
    batch = next(it)
    first_batch_s = time.perf_counter() - started
    emit({"type": "started", "worker_pids": _worker_pids(it), "first_batch_s": first_batch_s})
    consumer(batch)

    def next_batch() -> tuple[Any, bool]:
        """The next batch, crossing an epoch boundary if the data runs out (the block is then tainted)."""
        nonlocal it, epoch_restart_s
        try:
            return next(it), False
        except StopIteration:
            t = time.perf_counter()
            it = iter(loader)
            out = next(it)
            epoch_restart_s = time.perf_counter() - t
            emit({"type": "workers", "worker_pids": _worker_pids(it)})
            return out, True

    # In a short epoch the boundary is part of the steady state; in a long one it is an outlier.
    # An epoch is short if it is under 50 batches, or if two blocks in a row crossed a boundary.
    short_epoch = _length(loader) < 50
    crossed_last_block = False
    skip = warmup_batches(config, settings.skip_warmup)
    for _ in range(max(0, skip - 1)):  # the first batch was one of them
        consumer(next_batch()[0])

    # Workers deliver in round-robin bursts; blocks of whole rounds keep burst phase out of the spread.
    cycle = max(1, config.num_workers)
    rates: list[float] = []
    wait_total = step_total = 0.0
    measured_batches = measured_samples = 0
    stable = False
    while True:
        block_start = time.perf_counter()
        batches = samples = 0
        wait = step = 0.0
        tainted = thaw.take()
        crossed_this_block = False
        while True:
            t0 = time.perf_counter()
            batch, crossed = next_batch()
            t1 = time.perf_counter()
            consumer(batch)
            t2 = time.perf_counter()
            crossed_this_block |= crossed
            if crossed and crossed_last_block:
                short_epoch = True
            tainted |= crossed and not short_epoch
            wait += t1 - t0
            step += t2 - t1
            batches += 1
            samples += batch_size_of(batch, config.batch_size)
            if t2 - block_start >= settings.block_seconds and batches >= 2 and batches % cycle == 0:
                break
        elapsed = time.perf_counter() - block_start
        crossed_last_block = crossed_this_block
        if thaw.take():
            tainted = True
            deadline += elapsed  # the pause is not the trial's time
        if not tainted:
            rates.append(batches / elapsed)
            wait_total += wait
            step_total += step
            measured_batches += batches
            measured_samples += samples
            window = rates[-settings.min_blocks :]
            current = spread(window) if len(rates) >= settings.min_blocks else None
            emit(
                {
                    "type": "block",
                    "block": len(rates),
                    "batches": batches,
                    "samples": samples,
                    "seconds": elapsed,
                    "batches_per_s": batches / elapsed,
                    "samples_per_s": samples / elapsed,
                    "stall_fraction": wait_total / max(wait_total + step_total, 1e-12),
                    "elapsed_s": time.perf_counter() - started,
                    "spread": current,
                }
            )
            if current is not None and current <= settings.target_spread:
                stable = True
                break
        if time.perf_counter() >= deadline:
            break

    if not rates:
        raise RuntimeError(f"no clean block of batches within --trial-seconds {settings.trial_seconds:g}")
    window = rates[-settings.min_blocks :] if stable else rates
    batches_per_s = statistics.median(window)
    samples_per_batch = measured_samples / measured_batches
    emit(
        {
            "type": "finished",
            "batches_per_s": batches_per_s,
            "samples_per_s": batches_per_s * samples_per_batch,
            "spread": spread(window),
            "first_batch_s": first_batch_s,
            "stall_fraction": wait_total / max(wait_total + step_total, 1e-12),
            "blocks": len(rates),
            "measured_s": time.perf_counter() - started - first_batch_s,
            "warmup_batches": skip,
            "stable": stable,
            "epoch_restart_s": epoch_restart_s,
        }
    )


def _length(loader: Any) -> int:
    try:
        return len(loader)
    except TypeError:  # IterableDataset without __len__
        return 1 << 30


def _worker_pids(it: Any) -> list[int]:
    # Private, but stable since torch 1.x; without it we would have to guess workers from children.
    return [w.pid for w in getattr(it, "_workers", []) if w.pid is not None]

"""The measured loop of one trial: start-up apart, skip the prefetch buffer, blocks until stable, then the epoch
boundary (end the epoch early, time the wait for the next epoch's first batch).

Runs inside a trial process (runner.py). `emit` sends one JSON-able dict to the driver.
"""

from __future__ import annotations

import signal
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.trial.consumer import Consumer  # noqa: F401  (its old home: importers of measure.Consumer)
from loadertop.core.trial.loader import EpochControl
from loadertop.core.trial.sharding import ShardCheck, batch_rows

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


def batch_mb(batch: Any) -> float:
    """MiB of the tensors and arrays in a batch: what each batch in flight holds (in shared memory, from workers)."""
    if isinstance(batch, dict):
        return sum(batch_mb(v) for v in batch.values())
    if isinstance(batch, list | tuple):
        return sum(batch_mb(v) for v in batch)
    nbytes = getattr(batch, "nbytes", None)
    return nbytes / 2**20 if isinstance(nbytes, int) else 0.0


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


class Measurement:
    """One trial's measured loop, in steps a caller can interleave with others (ranks synchronise between them):
    `start` (iter: workers start), `first_batch`, `warm_up` (skip the start-up buffer), `blocks` (until stable or
    the deadline), `epoch_boundary` (end the epoch, time the next one's first batch)."""

    def __init__(
        self,
        loader: Any,
        config: TrialConfig,
        settings: Settings,
        consumer: Callable[[Any], None],
        control: EpochControl | None = None,
        check_shards: bool = False,
    ) -> None:
        self.loader = loader
        self.config = config
        self.settings = settings
        self.consumer = consumer
        self.control = control
        self.shards = ShardCheck(config.num_workers) if check_shards and config.num_workers > 1 else None
        self.thaw = _ThawFlag()
        self.it: Iterator[Any] | None = None
        self.started = 0.0
        self.deadline = 0.0
        self.first_batch_s = 0.0
        self.batch_mb = 0.0
        self.crossings: list[float] = []  # epoch boundaries crossed on the way: wait for the next epoch's first batch
        self.on_new_workers: Callable[[list[int]], None] | None = None
        self.skip = warmup_batches(config, settings.skip_warmup)

    def start(self) -> list[int]:
        """iter(loader): the workers start. Returns their pids."""
        self.started = time.perf_counter()
        self.deadline = self.started + self.settings.trial_seconds
        self.it = iter(self.loader)
        return _worker_pids(self.it)

    def worker_pids(self) -> list[int]:
        return _worker_pids(self.it)

    def first_batch(self) -> float:
        assert self.it is not None
        batch = next(self.it)
        now = time.perf_counter()
        self.first_batch_s = now - self.started
        self.batch_mb = batch_mb(batch)
        # The time budget starts here: start-up is reported apart (first_batch_s), and a spawn start that takes
        # seconds must not leave the trial a single block to measure.
        self.deadline = now + self.settings.trial_seconds
        self._seen(batch)
        self.consumer(batch)
        return self.first_batch_s

    def _seen(self, batch: Any) -> None:
        if self.shards is not None:
            self.shards.add(batch)

    def next_batch(self) -> tuple[Any, bool]:
        """The next batch, crossing an epoch boundary if the data runs out (the block is then tainted)."""
        assert self.it is not None
        t = time.perf_counter()
        try:
            return next(self.it), False
        except StopIteration:
            self.it = iter(self.loader)
            out = next(self.it)
            self.crossings.append(time.perf_counter() - t)
            if self.on_new_workers is not None:
                self.on_new_workers(_worker_pids(self.it))
            return out, True

    def warm_up(self) -> str | None:
        """Consume the start-up buffer unmeasured. Returns a warning when the workers of an IterableDataset all
        yield the same samples (checked on these batches, which are not measured, so hashing costs nothing)."""
        for _ in range(max(0, self.skip - 1)):  # the first batch was one of them
            batch = self.next_batch()[0]
            self._seen(batch)
            self.consumer(batch)
        return self.shards.verdict() if self.shards is not None else None

    def blocks(self, emit: Emit, stop_when_stable: bool = True, seconds: float | None = None) -> dict[str, Any]:
        """Measured blocks until the spread is under target (if `stop_when_stable`) or the deadline (now +
        `seconds` when given). Emits each block; returns the finished message (not emitted)."""
        settings, config = self.settings, self.config
        if seconds is not None:
            self.deadline = time.perf_counter() + seconds
        thaw = self.thaw
        # A trial starts at an epoch's start, so an epoch that ends within it is shorter than a trial: training
        # pays its boundary (workers stopped and started, the prefetch buffer refilled) every few seconds, and a
        # rate read between boundaries reads the refilled buffer draining. Then blocks are whole epochs, from the
        # first batch of one to the first of the next, boundary included. The warm-up may already have crossed
        # one: the first block then runs from mid-epoch to the next boundary and only aligns the blocks.
        whole_epochs = bool(self.crossings)
        align = whole_epochs
        # Workers deliver in round-robin bursts; blocks of whole rounds keep burst phase out of the spread.
        cycle = max(1, config.num_workers)
        rates: list[float] = []
        wait_total = step_total = 0.0
        measured_batches = measured_samples = 0
        stable = False
        opening = not align  # the next block opens the steady window (the probes' CPU and memory figures)
        while True:
            if opening:
                emit({"type": "measuring"})
                opening = False
            block_start = time.perf_counter()
            batches = samples = 0
            wait = step = 0.0
            tainted, opening, align = thaw.take() or align, align, False
            while True:
                t0 = time.perf_counter()
                batch, crossed = self.next_batch()
                t1 = time.perf_counter()
                self.consumer(batch)
                t2 = time.perf_counter()
                wait += t1 - t0
                step += t2 - t1
                batches += 1
                samples += batch_rows(batch, config.batch_size)
                if crossed and not whole_epochs:
                    # The first boundary: what was measured inside the first epoch is dropped, and blocks
                    # from here on are whole epochs.
                    whole_epochs, tainted, opening = True, True, True
                    rates.clear()
                    wait_total = step_total = 0.0
                    measured_batches = measured_samples = 0
                    break
                if whole_epochs:
                    if crossed and t2 - block_start >= settings.block_seconds:
                        break
                    if rates and t2 >= self.deadline:  # out of time mid-epoch: the whole epochs measured stand
                        tainted = True
                        break
                elif t2 - block_start >= settings.block_seconds and batches >= 2 and batches % cycle == 0:
                    break
            elapsed = time.perf_counter() - block_start
            if thaw.take():
                tainted = True
                self.deadline += elapsed  # the pause is not the trial's time
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
                        "elapsed_s": time.perf_counter() - self.started,
                        "spread": current,
                    }
                )
                if stop_when_stable and current is not None and current <= settings.target_spread:
                    stable = True
                    break
            if time.perf_counter() >= self.deadline:
                break

        if not rates:
            raise RuntimeError(f"no clean block of batches within --trial-seconds {settings.trial_seconds:g}")
        if not stop_when_stable and len(rates) >= settings.min_blocks:  # ran to the deadline: stable at the end?
            stable = spread(rates[-settings.min_blocks :]) <= settings.target_spread
        window = rates[-settings.min_blocks :] if stable else rates
        batches_per_s = statistics.median(window)
        samples_per_batch = measured_samples / measured_batches
        return {
            "type": "finished",
            "batches_per_s": batches_per_s,
            "samples_per_s": batches_per_s * samples_per_batch,
            "spread": spread(window) if len(window) >= 2 else None,  # one block says nothing of its spread
            "first_batch_s": self.first_batch_s,
            "stall_fraction": wait_total / max(wait_total + step_total, 1e-12),
            "blocks": len(rates),
            "measured_s": time.perf_counter() - self.started - self.first_batch_s,
            "warmup_batches": self.skip,
            "epoch_batches": _length(self.loader) if whole_epochs and _length(self.loader) < 1 << 30 else None,
            "stable": stable,
            "epoch_restart_s": statistics.median(self.crossings) if self.crossings else None,
        }

    def epoch_boundary(self) -> float | None:
        """End the epoch now and time the wait for the next epoch's first batch, from the moment the last batch
        of this one was handed out: worker shutdown and start-up without persistent workers, the resume round
        trip with them, and the first batch either way. None when the epoch cannot be ended (IterableDataset)
        and none was crossed."""
        if self.control is None or self.it is None:
            return statistics.median(self.crossings) if self.crossings else None
        self.control.end()
        last = time.perf_counter()
        for _ in self.it:  # the batches already in flight: the end of a real epoch has them too
            last = time.perf_counter()
        self.it = iter(self.loader)
        next(self.it)
        return time.perf_counter() - last


def measure(
    loader: Any,
    config: TrialConfig,
    settings: Settings,
    consumer: Callable[[Any], None],
    emit: Emit,
    control: EpochControl | None = None,
    check_shards: bool = False,
) -> None:
    """One trial of one process: every step of `Measurement`, reported through `emit`."""
    m = Measurement(loader, config, settings, consumer, control, check_shards)
    m.on_new_workers = lambda pids: emit({"type": "workers", "worker_pids": pids})
    emit({"type": "workers", "worker_pids": m.start()})
    first = m.first_batch()
    emit({"type": "started", "worker_pids": m.worker_pids(), "first_batch_s": first, "batch_mb": m.batch_mb})
    warning = m.warm_up()
    if warning:
        emit({"type": "notice", "level": "warning", "message": warning})
    finished = m.blocks(emit)
    finished["warnings"] = [warning] if warning else []
    emit(finished)
    # After "finished": the probes' steady window is closed, so the restart's CPU burst and new workers stay out
    # of the trial's CPU and memory figures. New workers are in the trial's process group all the same.
    m.on_new_workers = None
    emit({"type": "epoch", "epoch_restart_s": m.epoch_boundary()})


def _length(loader: Any) -> int:
    try:
        return len(loader)
    except TypeError:  # IterableDataset without __len__
        return 1 << 30


def _worker_pids(it: Any) -> list[int]:
    # Private, but stable since torch 1.x; without it we would have to guess workers from children.
    return [w.pid for w in getattr(it, "_workers", []) if w.pid is not None]

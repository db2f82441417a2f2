"""Measuring one configuration inside the training loop: by the real step, not an emulated one.

Per batch handed out: the wait in next() and the step (from the batch handed out to the next next() call). The
start-up buffer of the switch's iterator is skipped (it would count start-up as steady throughput); what switching
cost (from the switch to the first batch) is kept apart. An epoch that ends within the measurement is shorter than
it: training pays its boundary (workers started again, the buffer refilled) every epoch, so from then on the
measurement is of whole epochs, boundary included, as a sweep's trial measures them; the part epoch before it, read
off the switch's buffer, is dropped (at 10 workers on 2 CPUs it read 2× what the CPUs can decode).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import psutil

from loadertop.core.model import figures
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import TrialResult

MIN_BATCHES = 6  # fewer measured batches say nothing about a configuration
MAX_BATCHES = 400  # enough batches: stop even before the span is reached (fast steps)
BLOCK_S = 0.3  # the measured span is cut into blocks of at least this long for the spread, as a trial's are


@dataclass
class Meter:
    """One configuration's measurement, possibly across several iterators (an epoch ended mid-measurement)."""

    config: TrialConfig
    skip: int  # batches of the current iterator still to skip (its start-up buffer)
    switch_s: float = 0.0  # from the switch to its first batch: shutting the old workers, starting the new
    first_batch_s: float | None = None
    skipped: int = 0
    waits: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    pids: tuple[int, ...] = ()  # the current iterator's workers
    _cpu0: tuple[float, float] | None = None  # (wall, CPU seconds of the job and its workers) at the span's start
    _cpu_ok: bool = True  # False once the span crossed iterators (the old workers' CPU time is gone)
    whole_epochs: bool = False  # an epoch ended while measuring: whole epochs from then on, boundaries included
    iterators: int = 0  # iterators of this configuration opened while measuring it (the running one counts)
    boundaries: list[int] = field(default_factory=list)  # indices in waits of each whole epoch's first batch

    def opened(self, buffer: int, remaining: int) -> None:
        """An iterator of this configuration opened over the epoch's `remaining` batches. The switch's own skips its
        start-up `buffer` (leaving half of a tiny epoch's rest to measure). A later one is a new epoch: the first
        such boundary drops what was measured of the part epoch before it (read off the switch's buffer), and from
        then on epochs count whole, each boundary (the workers' start-up, the buffer refilled) in the wait for its
        first batch."""
        self.iterators += 1
        if self.iterators == 1:
            self.skip = min(buffer, remaining // 2)
            return
        self._cpu_ok = self._cpu_ok and not self.waits
        if not self.whole_epochs:
            self.whole_epochs = True
            self.waits, self.steps, self.samples = [], [], []
        self.skip = 0
        self.boundaries.append(len(self.waits))

    def add(self, wait_s: float, step_s: float, samples: int) -> None:
        if self.skip > 0:
            self.skip -= 1
            self.skipped += 1
            return
        if not self.waits and self._cpu_ok:
            cpu = _cpu_seconds(self.pids)
            self._cpu0 = (time.perf_counter(), cpu) if cpu is not None else None
        self.waits.append(wait_s)
        self.steps.append(step_s)
        self.samples.append(samples)

    @property
    def batches(self) -> int:
        return len(self.waits)

    @property
    def measured_s(self) -> float:
        return sum(self.waits) + sum(self.steps)

    def done(self, span_s: float) -> bool:
        n = self.batches
        return n >= MIN_BATCHES and (self.measured_s >= span_s or n >= MAX_BATCHES)

    def mean_step_s(self) -> float | None:
        return sum(self.steps) / len(self.steps) if self.steps else None

    def result(self, index: int, target_spread: float, span_s: float) -> TrialResult:
        """The TrialResult the planner reads; status "failed" when the budget cut it before half its span: a
        short lucky window must not win the choice."""
        total = self.measured_s
        if not self.done(span_s / 2) or total <= 0:
            error = f"cut by the budget after {self.batches} batches ({total:.1f} s): too little to compare"
            return TrialResult(index, self.config, "failed", error=error, first_batch_s=self.first_batch_s)
        blocks = figures.blocks_of(self.waits, self.steps, self.samples, BLOCK_S)
        run = figures.run_figures(blocks, self.waits)  # the stopwatch's: every batch, each boundary included
        steady = _steady(self.waits, self.steps, self.samples, set(self.boundaries))
        spread = steady.spread if steady is not None else None
        tails = steady.tails if steady is not None else None
        uss, pss = _memory(self.pids)
        return TrialResult(
            index=index,
            config=self.config,
            status="ok",
            samples_per_s=run.samples_per_s,
            batches_per_s=run.batches_per_s,
            spread=spread,
            first_batch_s=self.first_batch_s,
            stall_fraction=run.stall_fraction,
            blocks=len(blocks),
            measured_s=total,
            warmup_batches=self.skipped,
            stable=spread is not None and spread <= target_spread,
            wait_ms_p50=tails.p50 if tails else None,
            wait_ms_p95=tails.p95 if tails else None,
            wait_ms_p99=tails.p99 if tails else None,
            reason="measured by the training step",
            cpu_percent=self._cpu_percent(),
            worker_uss_mb=uss,
            total_pss_mb=pss,
        )

    def _cpu_percent(self) -> float | None:
        """CPU of the job's process and its workers over the span, in percent of one CPU (the planner's notes)."""
        cpu = _cpu_seconds(self.pids) if self._cpu_ok and self._cpu0 is not None else None
        if cpu is None or self._cpu0 is None:
            return None
        wall = time.perf_counter() - self._cpu0[0]
        return 100.0 * (cpu - self._cpu0[1]) / wall if wall > 0 else None


def _cpu_seconds(pids: tuple[int, ...]) -> float | None:
    try:
        times = [psutil.Process(pid).cpu_times() for pid in (os.getpid(), *pids)]
    except (psutil.Error, OSError):
        return None
    return sum(t.user + t.system for t in times)


def _memory(pids: tuple[int, ...]) -> tuple[tuple[float, ...], float | None]:
    """Each worker's USS and the PSS of the job and its workers, at the end of the span: the planner's memory
    budget stops the climb before the workers would take the memory the training needs. Empty when unreadable."""
    try:
        infos = [psutil.Process(pid).memory_full_info() for pid in (os.getpid(), *pids)]
    except (psutil.Error, OSError, AttributeError):
        return (), None
    pss = [getattr(info, "pss", None) for info in infos]
    total = sum(p for p in pss if p is not None) / figures.MB if all(p is not None for p in pss) else None
    return tuple(info.uss / figures.MB for info in infos[1:]), total


def _steady(
    waits: list[float], steps: list[float], samples: list[int], boundaries: set[int]
) -> figures.RunFigures | None:
    """The span's figures without each epoch's first batch, for its spread and tails (its blocks cut as a trial
    cuts them): its wait is the boundary (workers started again), a cost every epoch pays
    that the throughput keeps, but in the one block it falls in it read as noise (±23-30% on an I/O-bound case: a
    15% band that let 8 workers stand for 11, 14% slower)."""
    kept = [i for i in range(len(waits)) if i not in boundaries]
    blocks = figures.blocks_of([waits[i] for i in kept], [steps[i] for i in kept], [samples[i] for i in kept], BLOCK_S)
    if not blocks:
        return None
    return figures.run_figures(blocks, [waits[i] for i in kept])

"""The measured loop of one trial: start-up apart, skip the prefetch buffer, blocks until stable, then the epoch
boundary (end the epoch early, time the wait for the next epoch's first batch).

Runs inside a trial process (runner.py). `emit` sends one protocol message (model/protocol.py) to the driver.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from loadertop.core.model import figures
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.protocol import Block, Emit, Finished, Measuring
from loadertop.core.trial.loader import EpochControl
from loadertop.core.trial.shard_counts import idle_warning, set_epoch_warning, shard_count, shard_warning
from loadertop.core.trial.sharding import ShardCheck, batch_rows

# Blocks in a row that must all lie beyond an edge of the trial's decision before it stops early (MeasuredLoop.decide)
DECIDE_BLOCKS = 3


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

    def _on_cont(self, _signum: int, _frame: object) -> None:
        self.thawed = True

    def take(self) -> bool:
        was, self.thawed = self.thawed, False
        return was


@dataclass(frozen=True)
class _Timed:
    """One block as the loop timed it: its figures, its waits, and what it crossed."""

    block: figures.Block
    waits: tuple[float, ...] = ()  # each batch's wait in next(), s; the first batch after an epoch boundary left out
    first_boundary: bool = False  # crossed the trial's first epoch boundary: the blocks start over, whole epochs
    cut: bool = False  # out of time mid-epoch: not a whole epoch, not counted


PERSISTENT_EPOCHS = 2  # whole epochs a trial with persistent workers measures at least, on short epochs
BOUNDARIES_KEPT = 32  # the waits after the last this many epoch boundaries are reported one by one
WAIT_SAMPLE = 65536  # per-batch waits kept per trial (512 KiB of floats): every one up to this, then a reservoir


class _Waits:
    """Per-batch waits of the clean blocks, tagged with their block: all of them up to WAIT_SAMPLE, then a
    uniform reservoir (Algorithm R, fixed seed). The waits of any set of blocks are then a uniform sample too, so
    the tails can be read over the blocks counted, which are known only at the end."""

    def __init__(self) -> None:
        self.kept: list[tuple[int, float]] = []
        self.seen = 0
        self.rng = random.Random(0)

    def add(self, block: int, waits: tuple[float, ...]) -> None:
        for w in waits:
            self.seen += 1
            if len(self.kept) < WAIT_SAMPLE:
                self.kept.append((block, w))
            elif (j := self.rng.randrange(self.seen)) < WAIT_SAMPLE:
                self.kept[j] = (block, w)

    def of(self, from_block: int) -> list[float]:
        """The waits kept of blocks `from_block` on (s)."""
        return [w for b, w in self.kept if b >= from_block]


@dataclass
class _Tally:
    """The clean blocks so far, and their waits."""

    blocks: list[figures.Block] = field(default_factory=list)
    waits: _Waits = field(default_factory=_Waits)

    def add(self, timed: _Timed) -> None:
        self.waits.add(len(self.blocks), timed.waits)
        self.blocks.append(timed.block)

    @property
    def rates(self) -> list[float]:
        """samples/s of each block."""
        return [b.samples_per_s for b in self.blocks]

    def figures(self, from_block: int = 0) -> figures.RunFigures:
        return figures.run_figures(self.blocks[from_block:], self.waits.of(from_block))


class MeasuredLoop:
    """One trial's measured loop, in steps a caller can interleave with others (ranks synchronise between them):
    `start` (iter: workers start), `first_batch`, `warm_up` (skip the start-up buffer), `blocks` (until stable or
    the deadline; its outcome is the Finished message), `epoch_boundary` (end the epoch, time the next one's first
    batch)."""

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
        self.workers_start_s = 0.0  # what iter(loader) took: the parent starting its workers, one by one
        self.batch_mb = 0.0
        self.crossings: list[float] = []  # epoch boundaries crossed on the way: wait for the next epoch's first batch
        self.on_new_workers: Callable[[list[int]], None] | None = None
        self.skip = warmup_batches(config, settings.skip_warmup)
        self.decide: tuple[float | None, float | None] = (None, None)  # (below, above): see TrialRequest
        self.boundary_s: float | None = None  # the epoch boundary measured after the first run
        self.batches = 0  # handed out so far, every epoch
        self.epoch_batches: int | None = None  # the first epoch's length, once it ended
        self.warnings = _before(getattr(loader, "dataset", None), config, settings)  # the trial's warnings, in order

    def start(self) -> list[int]:
        """iter(loader): the workers start. Returns their pids."""
        self.started = time.perf_counter()
        self.deadline = self.started + self.settings.trial_seconds
        self.it = iter(self.loader)
        self.workers_start_s = time.perf_counter() - self.started
        return _worker_pids(self.it)

    def worker_pids(self) -> list[int]:
        return _worker_pids(self.it)

    def again(self) -> None:
        """Ready for another run on the same workers: the clock restarts as if after the start-up (not paid again),
        and one batch is taken as the first one was, so warm_up skips a whole buffer."""
        now = time.perf_counter()
        self.started = now - self.first_batch_s
        self.deadline = now + self.settings.trial_seconds
        batch = self.next_batch()[0]
        self._seen(batch)
        self.consumer(batch)

    def first_batch(self) -> float:
        assert self.it is not None
        try:
            batch = next(self.it)
        except StopIteration:  # a rank without a shard, an empty stream: say why when a check knows
            raise RuntimeError("; ".join(["the loader yielded no batch", *self.warnings[:1]])) from None
        self.batches += 1
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
        self.batches += 1
        try:
            return next(self.it), False
        except StopIteration:
            if self.epoch_batches is None:
                self.epoch_batches = self.batches - 1
            self.it = iter(self.loader)
            out = next(self.it)
            self.crossings.append(time.perf_counter() - t)
            if self.on_new_workers is not None:
                self.on_new_workers(_worker_pids(self.it))
            return out, True

    def warm_up(self) -> list[str]:
        """Consume the start-up buffer unmeasured. Returns the trial's warnings so far: the checks made before it
        (shard arithmetic, set_epoch) and, when the workers of an IterableDataset all yield the same samples, that
        (checked on these batches, which are not measured, so hashing costs nothing)."""
        for _ in range(max(0, self.skip - 1)):  # the first batch was one of them
            batch = self.next_batch()[0]
            self._seen(batch)
            self.consumer(batch)
        verdict = self.shards.verdict() if self.shards is not None else None
        if verdict:
            self.warnings.append(verdict)
        return list(self.warnings)

    def blocks(self, emit: Emit, stop_when_stable: bool = True, seconds: float | None = None) -> Finished:
        """Measured blocks until the spread is under target (if `stop_when_stable`) or the deadline (now +
        `seconds` when given). Emits each block; returns the Finished message (not emitted)."""
        if seconds is not None:
            self.deadline = time.perf_counter() + seconds
        # A trial starts at an epoch's start, so an epoch that ends within it is shorter than a trial: training
        # pays its boundary (workers stopped and started, the prefetch buffer refilled) every few seconds, and a
        # rate read between boundaries reads the refilled buffer draining. Then blocks are whole epochs, from the
        # first batch of one to the first of the next, boundary included. The warm-up may already have crossed
        # one: the first block then runs from mid-epoch to the next boundary and only aligns the blocks.
        whole_epochs = align = bool(self.crossings)
        opening = not align  # the next block opens the window (the probes' CPU and memory figures)
        tally = _Tally()
        stable = decided = False
        needed, overtime = self._epochs_needed(), 0
        while True:
            if opening:
                emit(Measuring())
                opening = False
            tainted, opening, align = self.thaw.take() or align, align, False
            block = self._time_block(whole_epochs, bool(tally.blocks) and not overtime)
            if block.first_boundary:  # what was measured inside the first epoch is dropped
                whole_epochs, tainted, opening, tally = True, True, True, _Tally()
            tainted = tainted or block.cut
            if self.thaw.take():
                tainted = True
                self.deadline += block.block.seconds  # the pause is not the trial's time
            if not tainted:
                current = self._record(tally, block, emit)
                if stop_when_stable and current is not None and current <= self.settings.target_spread:
                    stable = True
                    break
                if stop_when_stable and self._decided(tally):
                    decided = True
                    break
            if time.perf_counter() >= self.deadline:
                if len(tally.blocks) >= needed or not whole_epochs or overtime >= needed:
                    break
                # Too few whole epochs in the trial's time: one whole epoch more (a block in overtime is never cut),
                # rather than a trial with nothing measured, or persistent workers read without the boundary they
                # make cheap.
                overtime += 1
                if overtime == 1:
                    self.warnings.append(self._overtime_warning(needed))
        idle = idle_warning(self.loader, self.batches)
        if idle:
            self.warnings.append(idle)
        return replace(self._finished(tally, whole_epochs, stable, stop_when_stable), decided=decided)

    def _epochs_needed(self) -> int:
        """Whole epochs a trial measures at least once an epoch ends within it: PERSISTENT_EPOCHS with persistent
        workers (their gain is the boundary they make cheap: one epoch would weigh it once), else one."""
        return PERSISTENT_EPOCHS if self.config.persistent_workers and self.config.num_workers else 1

    def _overtime_warning(self, needed: int) -> str:
        budget = f"--trial-seconds {self.settings.trial_seconds:g}"
        if needed > 1:
            return (
                f"persistent workers are measured over at least {needed} whole epochs, each with its boundary: "
                f"the epochs past {budget} were measured too"
            )
        return (
            f"the first epoch took the whole {budget}: one more epoch was measured past it (a longer "
            "--trial-seconds measures more than one)"
        )

    def _why_no_block(self) -> str:
        """The no-clean-block failure with its cause: the epochs too short for the time, or the batches too slow."""
        head = f"no clean block of batches within --trial-seconds {self.settings.trial_seconds:g}"
        buffer = f"{self.skip} of them the start-up buffer"
        if self.epoch_batches is not None:
            return (
                f"{head}: an epoch is {self.epoch_batches} batches ({buffer}), and the first ended with no time left "
                "to measure a whole one; try a longer --trial-seconds"
            )
        return f"{head}: {self.batches} batches arrived ({buffer}); try a longer --trial-seconds"

    def _decided(self, tally: _Tally) -> bool:
        """Whether, with as many blocks as a settled run has (min_blocks), the last DECIDE_BLOCKS all lie beyond one
        edge of the decision the trial is measured for: more blocks of a noisy run would not change it. Fewer blocks
        would decide sooner, but their figure is no run's: three blocks after the start-up buffer differ from a plain
        loop's ten seconds by ±9% where five differ by ±3% (benchmarks/REPRO.md), and the figure is reported."""
        below, above = self.decide
        if len(tally.blocks) < max(DECIDE_BLOCKS, self.settings.min_blocks) or (below is None and above is None):
            return False
        recent = tally.rates[-DECIDE_BLOCKS:]
        return (above is not None and min(recent) > above) or (below is not None and max(recent) < below)

    def _time_block(self, whole_epochs: bool, have_blocks: bool) -> _Timed:
        """Time one block: whole rounds of the workers, or one whole epoch once blocks are whole epochs."""
        block_seconds, rows = self.settings.block_seconds, self.config.batch_size
        # Workers deliver in round-robin bursts; blocks of whole rounds keep burst phase out of the spread.
        cycle = max(1, self.config.num_workers)
        batches = samples = 0
        wait = step = 0.0
        waits: list[float] = []
        first_boundary = cut = False
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            batch, crossed = self.next_batch()
            t1 = time.perf_counter()
            self.consumer(batch)
            t2 = time.perf_counter()
            wait += t1 - t0
            step += t2 - t1
            if not crossed:  # the boundary's wait is epoch_restart_s (self.crossings), not part of the tails
                waits.append(t1 - t0)
            batches += 1
            samples += batch_rows(batch, rows)
            if crossed and not whole_epochs:
                first_boundary = True
                break
            if whole_epochs:
                if crossed and t2 - start >= block_seconds:
                    break
                if have_blocks and t2 >= self.deadline:  # out of time mid-epoch: the whole epochs measured stand
                    cut = True
                    break
            elif t2 - start >= block_seconds and batches >= 2 and batches % cycle == 0:
                break
        seconds = time.perf_counter() - start
        return _Timed(figures.Block(batches, samples, wait, step, seconds), tuple(waits), first_boundary, cut)

    def _record(self, tally: _Tally, timed: _Timed, emit: Emit) -> float | None:
        """Count a clean block and emit it; returns the spread of the last min_blocks blocks (None until then)."""
        tally.add(timed)
        min_blocks = self.settings.min_blocks
        current = figures.spread(tally.rates[-min_blocks:]) if len(tally.blocks) >= min_blocks else None
        block = timed.block
        emit(
            Block(
                block=len(tally.blocks),
                batches=block.batches,
                samples=block.samples,
                seconds=block.seconds,
                batches_per_s=block.batches_per_s,
                samples_per_s=block.samples_per_s,
                stall_fraction=figures.stall_fraction(tally.blocks),
                elapsed_s=time.perf_counter() - self.started,
                spread=current,
            )
        )
        return current

    def _finished(self, tally: _Tally, whole_epochs: bool, stable: bool, stop_when_stable: bool) -> Finished:
        """The trial's figures over the blocks counted (the last min_blocks when stable, else all): its samples over
        their seconds, as a stopwatch reads them (figures.run_figures)."""
        import torch

        settings = self.settings
        if not tally.blocks:
            raise RuntimeError(self._why_no_block())
        last = tally.rates[-settings.min_blocks :]
        if not stop_when_stable and len(last) >= settings.min_blocks:  # ran to the deadline: stable at the end?
            stable = (figures.spread(last) or 0.0) <= settings.target_spread
        first_counted = len(tally.blocks) - settings.min_blocks if stable else 0
        run = tally.figures(first_counted)
        tails = run.tails
        length = _length(self.loader)
        return Finished(
            batches_per_s=run.batches_per_s,
            samples_per_s=run.samples_per_s,
            spread=run.spread,
            first_batch_s=self.first_batch_s,
            workers_start_s=self.workers_start_s,
            stall_fraction=run.stall_fraction,
            blocks=len(tally.blocks),
            measured_s=time.perf_counter() - self.started - self.first_batch_s,
            warmup_batches=self.skip,
            stable=stable,
            epoch_batches=length if length < 1 << 30 else None,
            whole_epochs=whole_epochs,
            epoch_restart_s=figures.median_of(self.crossings),
            wait_ms_p50=tails.p50 if tails else None,
            wait_ms_p95=tails.p95 if tails else None,
            wait_ms_p99=tails.p99 if tails else None,
            boundary_wait_ms=tuple(c * 1e3 for c in self.crossings[-BOUNDARIES_KEPT:]),
            main_threads=torch.get_num_threads(),  # after the consumer's steps: a step that sets its own counts
            warnings=tuple(dict.fromkeys(self.warnings)),
        )

    def epoch_boundary(self) -> float | None:
        """End the epoch now and time the wait for the next epoch's first batch, from the moment the last batch
        of this one was handed out: worker shutdown and start-up without persistent workers, the resume round
        trip with them, and the first batch either way. None when the epoch cannot be ended (IterableDataset)
        and none was crossed."""
        if self.control is None or self.it is None:
            return figures.median_of(self.crossings)
        self.control.end()
        last = time.perf_counter()
        for _ in self.it:  # the batches already in flight: the end of a real epoch has them too
            last = time.perf_counter()
        self.it = iter(self.loader)
        next(self.it)
        return time.perf_counter() - last


def _before(dataset: Any, config: TrialConfig, settings: Settings) -> list[str]:
    """What can be told before a trial runs: too few shards for the readers, the set_epoch trap."""
    counted = shard_count(dataset)
    found = (
        [shard_warning(counted[0], config.num_workers, settings.ranks, nodes=settings.nodes, per_rank=counted[1])]
        if counted
        else []
    )
    found.append(set_epoch_warning(dataset, config))
    return [w for w in found if w]


def _length(loader: Any) -> int:
    try:
        return len(loader)
    except TypeError:  # IterableDataset without __len__
        return 1 << 30


def _worker_pids(it: Any) -> list[int]:
    # Private, but stable since torch 1.x; without it we would have to guess workers from children.
    if hasattr(it, "root") and not hasattr(it, "_workers"):  # a torchdata.nodes Loader's iterator
        from loadertop.core.trial.graph import worker_pids

        return worker_pids(it.root)
    return [w.pid for w in getattr(it, "_workers", []) if w.pid is not None]

"""The measured rounds: one process, 0 workers, every way of timing a sample interleaved, block by block, so a
machine that slows down midway (another job, a frequency change) weighs on each of them alike.

Each round times, in turn, samples plainly (no hook, no profiler: the reference), samples through the timing hooks,
samples under cProfile with a wall clock and under cProfile with a CPU clock, one batch of a 0-worker DataLoader with
the dataset's own collate, and the collate alone on the last samples. Each way fetches samples none of the others
fetched in that round: a sample fetched again finds what it read or encoded cached (the page cache, a tokenizer's
word cache), which the loader's samples would not. It stops when every way has timed
`samples` samples, or after `seconds` (two rounds at least).
"""

from __future__ import annotations

import collections
import cProfile
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from loadertop.core.trial.stage_hooks import HookSet

MODES = ("plain", "hooked", "profiled", "profiled_cpu", "loader", "collate")
BLOCK_S = 0.05  # a block of samples lasts about this long (at most a batch of them)
MIN_ROUNDS = 2


@dataclass
class Totals:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    samples: int = 0

    def add(self, wall: float, cpu: float, samples: int) -> None:
        self.wall_s += wall
        self.cpu_s += cpu
        self.samples += samples

    def per_sample(self) -> tuple[float, float]:
        n = max(1, self.samples)
        return self.wall_s / n, self.cpu_s / n


class Fetcher:
    """One sample per call: dataset[i] over a shuffled cycle of its indices, or the next of its iterator (started
    again at its end). Its code object is what the profile's entry hangs under."""

    def __init__(self, dataset: Any, iterable: bool, seed: int = 0) -> None:
        self.dataset = dataset
        self.iterable = iterable
        self.order: list[int] = []
        self.position = 0
        self.iterator: Iterator[Any] | None = None
        if not iterable:
            self.order = list(range(len(dataset)))
            random.Random(seed).shuffle(self.order)

    def __call__(self) -> Any:
        if not self.iterable:
            index = self.order[self.position % len(self.order)]
            self.position += 1
            return self.dataset[index]
        if self.iterator is None:
            self.iterator = iter(self.dataset)
        try:
            return next(self.iterator)
        except StopIteration:  # the end of an epoch: the next starts
            self.iterator = iter(self.dataset)
        try:
            return next(self.iterator)
        except StopIteration:
            raise ValueError("the dataset's iterator yields no sample") from None


def rows_of(batch: Any, default: int) -> int:
    """The samples in a collated batch: its first tensor's first dimension (default when it holds no tensor)."""
    from loadertop.core.trial.transport import tensors_of

    first = next((t for t in tensors_of(batch) if t.dim() > 0), None)
    return int(first.shape[0]) if first is not None else default


@dataclass
class Rounds:
    """What the rounds measured: each way's totals, both profiles, and a batch of the 0-worker loader."""

    totals: dict[str, Totals]
    profile_wall: cProfile.Profile
    profile_cpu: cProfile.Profile
    batch: Any = None
    rows: int = 0
    elapsed_s: float = 0.0
    kept: collections.deque[Any] = field(default_factory=collections.deque)


class RoundRunner:
    """The interleaved blocks over one dataset (see the module's docstring)."""

    def __init__(self, fetch: Fetcher, batches: Callable[[], Iterator[Any]], collate: Callable[[list[Any]], Any],
                 hooks: HookSet, batch_size: int) -> None:  # fmt: skip
        self.fetch = fetch
        self.new_batches = batches
        self.batches = batches()
        self.collate = collate
        self.hooks = hooks
        self.batch_size = batch_size
        self.block = batch_size
        self.rounds = Rounds({mode: Totals() for mode in MODES}, cProfile.Profile(),
                             cProfile.Profile(time.process_time_ns, 1e-9))  # fmt: skip
        self.rounds.kept = collections.deque(maxlen=batch_size)

    def modes(self) -> tuple[str, ...]:
        return MODES if self.hooks.sites else tuple(m for m in MODES if m != "hooked")

    def run(self, seconds: float, samples: int) -> Rounds:
        start = time.perf_counter()
        self.warm_up()
        rounds = 0
        while True:
            modes = self.modes()
            for mode in modes[rounds % len(modes) :] + modes[: rounds % len(modes)]:
                self.timed_block(mode, self.rounds.totals[mode])
            rounds += 1
            done = min(self.rounds.totals[m].samples for m in modes if m != "collate") >= samples
            if rounds >= MIN_ROUNDS and (done or time.perf_counter() - start >= seconds):
                break
        self.rounds.elapsed_s = time.perf_counter() - start
        if not self.hooks.sites:
            self.rounds.totals["hooked"] = self.rounds.totals["plain"]
        return self.rounds

    def warm_up(self) -> None:
        """One block of each way, not counted; then blocks sized to BLOCK_S from the plain samples' time."""
        plain = Totals()
        self.block = 1
        for mode in self.modes():
            self.timed_block(mode, plain if mode == "plain" else Totals(), warm=True)
        per_sample = plain.wall_s / max(1, plain.samples)
        self.block = max(1, min(self.batch_size, int(BLOCK_S / max(per_sample, 1e-9))))

    def timed_block(self, mode: str, totals: Totals, warm: bool = False) -> None:
        if mode == "loader":
            self.loader_block(totals)
        elif mode == "collate":
            self.collate_block(totals)
        else:
            self.sample_block(mode, totals, warm)

    def sample_block(self, mode: str, totals: Totals, warm: bool) -> None:
        profile = None
        if mode == "profiled" and not warm:
            profile = self.rounds.profile_wall
        elif mode == "profiled_cpu" and not warm:
            profile = self.rounds.profile_cpu
        if mode == "plain":
            self.hooks.restore()
        else:
            self.hooks.install(record=mode == "hooked" and not warm)
        fetch, kept = self.fetch, self.rounds.kept
        wall, cpu = time.perf_counter(), time.process_time()
        if profile is not None:
            profile.enable()
        for _ in range(self.block):
            sample = fetch()
            if mode == "plain":
                kept.append(sample)
        if profile is not None:
            profile.disable()
        totals.add(time.perf_counter() - wall, time.process_time() - cpu, self.block)
        self.hooks.restore()

    def loader_block(self, totals: Totals) -> None:
        """One batch of the 0-worker loader (a new iterator at the end of an epoch, not counted)."""
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            batch = next(self.batches)
        except StopIteration:  # the end of an epoch (the first batch was checked: the next epoch has one)
            self.batches = self.new_batches()
            return self.loader_block(totals)
        rows = rows_of(batch, self.batch_size)
        totals.add(time.perf_counter() - wall, time.process_time() - cpu, rows)
        self.rounds.batch, self.rounds.rows = batch, rows

    def collate_block(self, totals: Totals) -> None:
        kept = list(self.rounds.kept)
        if not kept:
            return
        wall, cpu = time.perf_counter(), time.process_time()
        self.collate(kept)
        totals.add(time.perf_counter() - wall, time.process_time() - cpu, len(kept))

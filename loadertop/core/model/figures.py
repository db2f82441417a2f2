"""One definition of each figure loadertop reports, whichever way a loader is measured: a sweep's trial
(trial/measure.py), tune inside the training loop (job/tune_measure.py), watch and attach (job/watch.py,
engine/live/). The same batch times give the same numbers in all three (tests/test_figures.py).

A throughput is what a stopwatch around the training loop reads: the samples handed out over the seconds they
took, slow blocks and epoch boundaries included (a median of block rates would skip the slow blocks that training
pays for). A spread says how steady a run was inside itself; how far two fresh runs of one configuration differ is
another figure (`between_runs`), and only that one says how far a run's mean is from the next run's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MB = 2**20  # loadertop's MB is a MiB throughout


def median_of(values: Iterable[float | None]) -> float | None:
    """The median of the values measured (None entries are readings that failed); None over none."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def mean_of(values: Iterable[float | None]) -> float | None:
    """The mean of the values measured (None entries are readings that failed); None over none."""
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0 ≤ q ≤ 1) by linear interpolation between the closest ranks (numpy's default, Hyndman and
    Fan's type 7); None over nothing, the value itself over one."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Tails:
    """The wait in next() per batch, in ms: median, 95th and 99th percentiles."""

    p50: float
    p95: float
    p99: float


def wait_tails(waits_s: Sequence[float]) -> Tails | None:
    """The tails of per-batch waits given in seconds; None without two waits (one wait has no tail)."""
    if len(waits_s) < 2:
        return None
    ms = [w * 1e3 for w in waits_s]
    return Tails(*(quantile(ms, q) or 0.0 for q in (0.50, 0.95, 0.99)))


def spread(rates: Sequence[float]) -> float | None:
    """How steady a run was inside itself: the interquartile range of its block rates over their median, robust to
    the odd slow block (a GC pause, a page-cache miss). None below two blocks: one block says nothing of it."""
    if len(rates) < 2:
        return None
    mid = statistics.median(rates)
    if mid <= 0:
        return None
    q1, q3 = quantile(rates, 0.25), quantile(rates, 0.75)
    assert q1 is not None and q3 is not None
    return (q3 - q1) / mid


@dataclass(frozen=True)
class Block:
    """Consecutive batches timed together."""

    batches: int
    samples: int
    wait_s: float  # blocked in next(): the consumer waited for data
    step_s: float  # in the consumer
    seconds: float  # the block's wall time (wait + step, and whatever else the loop did)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0


def blocks_of(
    waits_s: Sequence[float], steps_s: Sequence[float], samples: Sequence[int], block_s: float
) -> list[Block]:
    """Per-batch records cut into blocks of consecutive batches lasting at least `block_s` each (a short tail joins
    the last block), as a trial cuts its measured loop while it runs."""
    out: list[Block] = []
    start, spent = 0, 0.0
    for i in range(len(waits_s)):
        spent += waits_s[i] + steps_s[i]
        if spent >= block_s:
            out.append(_block(waits_s, steps_s, samples, start, i + 1))
            start, spent = i + 1, 0.0
    if start < len(waits_s):
        tail = _block(waits_s, steps_s, samples, start, len(waits_s))
        out[-1:] = [_joined(out[-1], tail)] if out else [tail]
    return out


def _block(waits: Sequence[float], steps: Sequence[float], samples: Sequence[int], lo: int, hi: int) -> Block:
    wait, step = sum(waits[lo:hi]), sum(steps[lo:hi])
    return Block(hi - lo, sum(samples[lo:hi]), wait, step, wait + step)


def _joined(a: Block, b: Block) -> Block:
    return Block(a.batches + b.batches, a.samples + b.samples, a.wait_s + b.wait_s, a.step_s + b.step_s,
                 a.seconds + b.seconds)  # fmt: skip


@dataclass(frozen=True)
class RunFigures:
    """What one run of a configuration measured, from its blocks and its per-batch waits."""

    samples_per_s: float
    batches_per_s: float
    spread: float | None
    stall_fraction: float
    tails: Tails | None


def stall_fraction(blocks: Sequence[Block]) -> float:
    """The share of the loop's time spent waiting for data: Σ blocked in next() ÷ (Σ blocked + Σ consumer step)."""
    wait, step = sum(b.wait_s for b in blocks), sum(b.step_s for b in blocks)
    return wait / max(wait + step, 1e-12)


def run_figures(blocks: Sequence[Block], waits_s: Sequence[float]) -> RunFigures:
    """The run's throughput (its samples over its seconds), its spread over the block rates, the share of the time
    the consumer waited for data, and the tails of the waits given (not empty: `blocks`)."""
    seconds = sum(b.seconds for b in blocks)
    return RunFigures(
        samples_per_s=sum(b.samples for b in blocks) / seconds,
        batches_per_s=sum(b.batches for b in blocks) / seconds,
        spread=spread([b.samples_per_s for b in blocks]),
        stall_fraction=stall_fraction(blocks),
        tails=wait_tails(waits_s),
    )


def per_epoch(batches_per_s: float, epoch_batches: int, boundary_s: float) -> float:
    """The batch rate over whole epochs, from the rate between boundaries and the wait at one boundary (from an
    epoch's last batch to the next one's first): training pays the boundary once an epoch, where a batch would
    otherwise have taken 1 / rate. A boundary quicker than that costs nothing."""
    if epoch_batches < 1 or batches_per_s <= 0:
        return batches_per_s
    extra = max(0.0, boundary_s - 1.0 / batches_per_s)
    return epoch_batches / (epoch_batches / batches_per_s + extra)


@dataclass(frozen=True)
class Between:
    """How far fresh runs of one configuration differ from each other: the pooled standard deviation of a run about
    its configuration's mean, relative to that mean, and the degrees of freedom behind it (runs beyond the first,
    summed over the configurations measured more than once)."""

    sd: float | None  # None when no configuration was measured twice
    dof: int


def between_runs(runs: Mapping[object, Sequence[float]]) -> Between:
    """`Between` over each configuration's run throughputs."""
    squares, dof = 0.0, 0
    for xs in runs.values():
        if len(xs) < 2:
            continue
        mean = statistics.fmean(xs)
        if mean > 0:
            squares += sum((x / mean - 1.0) ** 2 for x in xs)
            dof += len(xs) - 1
    return Between(math.sqrt(squares / dof) if dof else None, dof)


def relative_gap(a: float, b: float) -> float:
    """How much faster `a` is than `b`, as a fraction of `b` (negative: slower); 0 when `b` is 0."""
    return a / b - 1.0 if b else 0.0


def at_least_within(a: float, b: float, band: float) -> bool:
    """Whether `a` is at least `b` less the relative band: as fast within the band (faster counts too)."""
    return a >= b * (1.0 - band)


def faster_beyond(a: float, b: float, band: float) -> bool:
    """Whether `a` is faster than `b` by more than the relative band."""
    return a > b * (1.0 + band)

"""One trial as the panes show it: what was sampled while it ran, then, once it has finished, its TrialResult.

A finished trial reads the figures of its result (what the table shows); samples that arrive after it finished
(the probe tick taken after the workers exited) are not taken in.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from loadertop.core.model.config import TrialConfig
from loadertop.core.model.events import ProbeSample, TrialProgress
from loadertop.core.model.results import TrialResult
from loadertop.core.model.series import slope_per_min

HISTORY = 600  # samples kept per series: minutes at the default interval, a few hundred KB at most
CLIMB_MB_PER_MIN = 1.0  # a worker whose USS grows faster than this, steadily, gets a warning
CLIMB_MIN_SPAN_S = 10.0  # ...once it has been watched this long


@dataclass
class WorkerMemory:
    """One worker's USS, as the memory pane shows it."""

    label: str
    series: list[float]
    now: float | None
    slope: float | None  # MB/min
    climbing: bool


@dataclass
class TrialTrace:
    """Everything sampled while one trial ran, kept after it ends so a finished trial can be shown."""

    index: int
    config: TrialConfig
    first_batch_s: float | None = None
    samples_per_s: list[float] = field(default_factory=list)
    batches_per_s: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)  # 1 - stall fraction, per progress block
    spread: float | None = None
    stall_fraction: float | None = None
    worker_pids: list[int] = field(default_factory=list)
    uss: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # pid -> (t, USS MB)
    sampled_pss_mb: float | None = None
    sampled_rss_mb: float | None = None
    gpu_util: dict[int, list[float]] = field(default_factory=dict)
    result: TrialResult | None = None

    @property
    def pss_mb(self) -> float | None:
        return self.result.total_pss_mb if self.result is not None else self.sampled_pss_mb

    @property
    def rss_mb(self) -> float | None:
        return self.result.rss_mb if self.result is not None else self.sampled_rss_mb

    def progress(self, event: TrialProgress) -> None:
        push(self.samples_per_s, event.samples_per_s)
        push(self.batches_per_s, event.batches_per_s)
        push(self.busy, 1.0 - event.stall_fraction)
        self.spread = event.spread
        self.stall_fraction = event.stall_fraction

    def probe(self, sample: ProbeSample) -> bool:
        """Take in one probe tick; False (and nothing changed) once the trial has finished."""
        if self.result is not None:
            return False
        for worker in sample.workers:
            if worker.uss_mb is None:
                continue
            if worker.pid not in self.worker_pids:
                self.worker_pids.append(worker.pid)
            push(self.uss.setdefault(worker.pid, []), (sample.t, worker.uss_mb))
        if sample.total_pss_mb is not None:
            self.sampled_pss_mb = sample.total_pss_mb
        if sample.rss_mb is not None:
            self.sampled_rss_mb = sample.rss_mb
        for gpu in sample.gpus:
            push(self.gpu_util.setdefault(gpu.index, []), gpu.util_percent)
        return True

    def workers(self) -> list[WorkerMemory]:
        result = self.result
        final_uss = result.worker_uss_mb if result else ()
        final_slopes = result.worker_uss_slope_mb_per_min if result else ()
        out = []
        for i, pid in enumerate(self.worker_pids):
            points = self.uss.get(pid, [])
            # Running: our slope over what the sparkline shows. Finished: the result's figures, as the table.
            rate = final_slopes[i] if i < len(final_slopes) else slope(points)
            now = final_uss[i] if i < len(final_uss) else (points[-1][1] if points else None)
            out.append(WorkerMemory(f"w{i}", [v for _, v in points], now, rate, climbing(points, rate)))
        return out


def steady(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Drop the first third of the watched time: a worker grows while it imports and fills its first
    batches, and that is not the leak-like growth the slope is for."""
    if len(points) < 2:
        return points
    cut = points[0][0] + (points[-1][0] - points[0][0]) / 3
    return [p for p in points if p[0] >= cut]


def slope(points: list[tuple[float, float]]) -> float | None:
    """USS slope in MB/min after warm-up (the shared formula); None until there are a few seconds of it."""
    return slope_per_min(steady(points))


def climbing(points: list[tuple[float, float]], slope: float | None) -> bool:
    """Steady growth, not one step: fast enough, watched long enough, several steps up and few down."""
    if slope is None or slope < CLIMB_MB_PER_MIN or len(points) < 4:
        return False
    if points[-1][0] - points[0][0] < CLIMB_MIN_SPAN_S:
        return False
    values = [v for _, v in steady(points)]
    changes = [b - a for a, b in itertools.pairwise(values) if b != a]
    rises = sum(c > 0 for c in changes)
    return rises >= 3 and rises / len(changes) >= 0.75


def push(series: list, value: object) -> None:
    """Append in place, keeping at most HISTORY items."""
    series.append(value)
    if len(series) > HISTORY:
        del series[: len(series) - HISTORY]

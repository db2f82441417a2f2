"""One trial as the panes show it: what was sampled while it ran, then, once it has finished, its TrialResult.

A finished trial reads the figures of its result (what the table shows); samples that arrive after it finished
(the probe tick taken after the workers exited) are not taken in. Memory figures (which workers are the trial's,
their slopes, the ⚠) are the engine's (ProbeSample.uss, then the result): the trace keeps USS readings only to draw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from loadertop.core.model.config import TrialConfig
from loadertop.core.model.events import ProbeSample, TrialProgress, UssFigures
from loadertop.core.model.results import TrialResult

HISTORY = 600  # samples kept per series: minutes at the default interval, a few hundred KB at most

T = TypeVar("T")


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
    median_samples_per_s: float | None = None  # the engine's figure so far
    stall_fraction: float | None = None
    worker_pids: list[int] = field(default_factory=list)
    uss: dict[int, list[float]] = field(default_factory=dict)  # pid -> its USS readings (MB), drawn as a sparkline
    figures: UssFigures | None = None  # the engine's latest judgement of the trial's own workers
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
        self.median_samples_per_s = event.median_samples_per_s
        self.stall_fraction = event.stall_fraction

    def probe(self, sample: ProbeSample) -> bool:
        """Take in one probe tick; False (and nothing changed) once the trial has finished."""
        if self.result is not None:
            return False
        for worker in sample.workers:
            if worker.uss_mb is not None:
                push(self.uss.setdefault(worker.pid, []), worker.uss_mb)
        if sample.uss is not None:
            self.figures = sample.uss
        if sample.total_pss_mb is not None:
            self.sampled_pss_mb = sample.total_pss_mb
        if sample.rss_mb is not None:
            self.sampled_rss_mb = sample.rss_mb
        for gpu in sample.gpus:
            push(self.gpu_util.setdefault(gpu.index, []), gpu.util_percent)
        return True

    @property
    def leak(self) -> str | None:
        """The engine's leak sentence: the result's once finished, else the latest tick's."""
        if self.result is not None:
            return self.result.leak
        return self.figures.leak if self.figures is not None else None

    def workers(self) -> list[WorkerMemory]:
        """The trial's own workers as the engine listed them. Running: the latest tick's figures. Finished: the
        result's (what the table shows), in the same order, drawn with the readings of the pid at that place."""
        live = self.figures.workers if self.figures is not None else ()
        result = self.result
        if result is None or not result.worker_uss_mb:
            return [
                WorkerMemory(f"w{i}", self.uss.get(w.pid, []), w.uss_mb, w.slope_mb_per_min, w.climbing)
                for i, w in enumerate(live)
            ]
        slopes, climbing = result.worker_uss_slope_mb_per_min, result.worker_uss_climbing
        return [
            WorkerMemory(
                f"w{i}",
                self.uss.get(live[i].pid, []) if i < len(live) else [],
                uss,
                slopes[i] if i < len(slopes) else None,
                i < len(climbing) and climbing[i],
            )
            for i, uss in enumerate(result.worker_uss_mb)
        ]


def push(series: list[T], value: T) -> None:
    """Append in place, keeping at most HISTORY items."""
    series.append(value)
    if len(series) > HISTORY:
        del series[: len(series) - HISTORY]

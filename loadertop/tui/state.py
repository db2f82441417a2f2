"""The app's model of the sweep: engine events in, plain data out.

No Textual here: the panes read this model, and tests drive it with events directly. `apply()` returns
the names of the panes an event made stale, so the app redraws only those, and only on its timer.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from loadertop.core.engine.analysis import analyze
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import (
    Event,
    Notice,
    ProbeSample,
    SweepFinished,
    SweepStarted,
    TrialFinished,
    TrialProgress,
    TrialStarted,
)
from loadertop.core.model.results import Knee, MachineInfo, Recommendation, SweepResult, TrialResult

HISTORY = 600  # samples kept per series: minutes at the default interval, a few hundred KB at most
CLIMB_MB_PER_MIN = 1.0  # a worker whose USS grows faster than this, steadily, gets a warning
CLIMB_MIN_SPAN_S = 10.0  # ...once it has been watched this long

PANES = ("header", "gpu", "memory", "live", "chart", "table")


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
    start_t: float | None = None
    samples_per_s: list[float] = field(default_factory=list)
    batches_per_s: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)  # 1 - stall fraction, per progress block
    spread: float | None = None
    stall_fraction: float | None = None
    elapsed_s: float = 0.0
    worker_pids: list[int] = field(default_factory=list)
    uss: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # pid -> (t, USS MB)
    pss_mb: float | None = None
    rss_mb: float | None = None
    cpu_percent: float | None = None
    gpu_util: dict[int, list[float]] = field(default_factory=dict)
    gpu_mem_mb: dict[int, float] = field(default_factory=dict)
    result: TrialResult | None = None

    def workers(self) -> list[WorkerMemory]:
        engine_slopes = self.result.worker_uss_slope_mb_per_min if self.result else ()
        out = []
        for i, pid in enumerate(self.worker_pids):
            points = self.uss.get(pid, [])
            # Our own slope from what the pane shows (so number and sparkline agree); the engine's when we
            # have no samples (a result loaded from disk).
            slope = _slope(points)
            if slope is None and not points and i < len(engine_slopes):
                slope = engine_slopes[i]
            out.append(
                WorkerMemory(
                    label=f"w{i}",
                    series=[v for _, v in points],
                    now=points[-1][1] if points else None,
                    slope=slope,
                    climbing=_climbing(points, slope),
                )
            )
        return out


def family(config: TrialConfig) -> TrialConfig:
    """The configuration with the worker count (and what applies only to workers) taken out."""
    return replace(config, num_workers=0, prefetch_factor=None, persistent_workers=False, start_method=None)


def _steady(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Drop the first third of the watched time: a worker grows while it imports and fills its first
    batches, and that is not the leak-like growth the slope is for."""
    if len(points) < 2:
        return points
    cut = points[0][0] + (points[-1][0] - points[0][0]) / 3
    return [p for p in points if p[0] >= cut]


def _slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares USS slope in MB/min after warm-up; None until there are a few seconds of it."""
    points = _steady(points)
    if len(points) < 3 or points[-1][0] - points[0][0] < 3.0:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var <= 0:
        return None
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 60.0


def _climbing(points: list[tuple[float, float]], slope: float | None) -> bool:
    """Steady growth, not one step: fast enough, watched long enough, several steps up and few down."""
    if slope is None or slope < CLIMB_MB_PER_MIN or len(points) < 4:
        return False
    if points[-1][0] - points[0][0] < CLIMB_MIN_SPAN_S:
        return False
    values = [v for _, v in _steady(points)]
    changes = [b - a for a, b in itertools.pairwise(values) if b != a]
    rises = sum(c > 0 for c in changes)
    return rises >= 3 and rises / len(changes) >= 0.75


@dataclass
class Row:
    """One configuration in the results table."""

    config: TrialConfig
    # pending | queued | running | ok | failed | skipped | interrupted | not run | not needed
    status: str = "pending"
    result: TrialResult | None = None
    baseline: TrialResult | None = None  # the same configuration in the run this one is compared with
    runs: list[TrialResult] = field(default_factory=list)  # this sweep's measurements (finalists are repeated)
    _before_rerun: tuple[str, TrialResult | None] | None = None

    def samples_per_s(self) -> float | None:
        """The mean over this sweep's runs of the configuration, as the recommendation quotes it."""
        rates = [r.samples_per_s for r in self.runs if r.status == "ok" and r.samples_per_s]
        if len(rates) > 1:
            return sum(rates) / len(rates)
        return self.result.samples_per_s if self.result is not None else None

    def change(self) -> float | None:
        """Relative change of samples/s against the baseline, when both were measured."""
        new, old = self.samples_per_s(), self.baseline
        if self.status != "ok" or new is None or old is None or old is self.result:
            return None
        if not old.samples_per_s or old.status != "ok":
            return None
        return new / old.samples_per_s - 1.0


class SweepState:
    """Accumulates the event stream of one or more sweeps (a rerun keeps what came before)."""

    def __init__(self, previous: SweepResult | None = None) -> None:
        self.machine: MachineInfo | None = previous.machine if previous else None
        self.settings: Settings | None = None
        self.run_dir: str | None = None
        self.phase = "idle"  # idle | running | finished | crashed
        self.only = False  # the running sweep reruns a few rows rather than the whole table
        self.paused = False
        self.stopping = False
        self.error: str | None = None
        self.rows: list[Row] = []
        self.traces: dict[TrialConfig, TrialTrace] = {}
        self.live: TrialTrace | None = None
        self.last: TrialTrace | None = None
        self.selected: TrialConfig | None = None
        self.by_index: dict[int, TrialConfig] = {}
        self.total = 0
        self.current: int | None = None
        self.t = 0.0
        self.finish_times: list[float] = []
        self.gpu_recent: dict[int, list[float]] = {}
        self.gpu_unavailable: str | None = None
        self.busy_recent: list[float] = []
        self.result: SweepResult | None = previous  # the latest whole picture (merged after a row rerun)
        self.previous: SweepResult | None = previous  # what the running sweep is compared with
        self.notices: list[Notice] = []
        self.sweeps_started = 0
        if previous:
            for trial in previous.trials:
                self.rows.append(Row(trial.config, trial.status, trial))

    # ---- reading -------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.phase == "running"

    @property
    def knee(self) -> Knee | None:
        if self.running and not self.only:
            return None  # a full rerun is under way: the old knee no longer describes the table
        return self.result.knee if self.result else None

    @property
    def recommendation(self) -> Recommendation | None:
        if self.running and not self.only:
            return None
        return self.result.recommendation if self.result else None

    def finished_count(self) -> int:
        return len(self.finish_times)

    def eta(self) -> float | None:
        """Seconds left in this sweep: the mean finished-trial time times the trials to go."""
        if not self.running:
            return None
        remaining = self.total - self.finished_count()
        if remaining <= 0:
            return 0.0
        if self.finish_times:
            per_trial = self.finish_times[-1] / len(self.finish_times)
            into_current = self.t - self.finish_times[-1]
        else:
            per_trial = (self.settings.trial_seconds if self.settings else 8.0) + 2.0
            into_current = self.t
        return max(0.0, per_trial * remaining - into_current)

    def focus(self) -> TrialTrace | None:
        """The trial the memory and live panes show: the running one, else the highlighted row's."""
        if self.live is not None:
            return self.live
        if self.selected is not None and self.selected in self.traces:
            return self.traces[self.selected]
        return self.last

    def row_for(self, config: TrialConfig) -> Row:
        for row in self.rows:
            if row.config == config:
                return row
        # An adaptive search adds configurations as it goes: slot them into their climb, not at the end.
        row = Row(config)
        self.rows.append(row)
        families = list(dict.fromkeys(family(r.config) for r in self.rows))
        self.rows.sort(key=lambda r: (families.index(family(r.config)), r.config.num_workers))
        return row

    def is_knee(self, row: Row) -> bool:
        knee, rec = self.knee, self.recommendation
        if knee is None or knee.num_workers is None or row.config.num_workers != knee.num_workers:
            return False
        if rec is None:
            return True
        # With several batch sizes (etc.) in the table, mark the knee on the recommended setting's climb.
        return family(row.config) == family(rec.config)

    def is_recommended(self, row: Row) -> bool:
        rec = self.recommendation
        return rec is not None and rec.config == row.config

    def snapshot(self) -> SweepResult | None:
        """The result to export now: the finished one, or the trials finished so far mid-sweep."""
        if not self.running and self.result is not None:
            return self.result
        if self.machine is None or self.settings is None:
            return self.result
        trials = tuple(row.result for row in self.rows if row.result is not None)
        return SweepResult(
            machine=self.machine,
            settings=self.settings,
            trials=trials,
            knee=self.knee,
            recommendation=self.recommendation,
            run_dir=self.run_dir,
            interrupted=True,
            wall_s=self.t,
        )

    # ---- writing -------------------------------------------------------------------------------

    def begin(self, only: bool) -> None:
        """Called by the app just before it starts a sweep, so SweepStarted knows what kind it is."""
        self.only = only and bool(self.rows)
        self.phase = "running"
        self.paused = False
        self.stopping = False
        self.error = None

    def apply(self, event: Event) -> set[str]:
        if isinstance(event, ProbeSample):
            return self._probe(event)
        if isinstance(event, TrialProgress):
            return self._progress(event)
        if isinstance(event, TrialStarted):
            return self._trial_started(event)
        if isinstance(event, TrialFinished):
            return self._trial_finished(event.result)
        if isinstance(event, SweepStarted):
            return self._sweep_started(event)
        if isinstance(event, SweepFinished):
            return self._sweep_finished(event.result)
        if isinstance(event, Notice):
            self.notices.append(event)
            return {"header"}
        return set()

    def crashed(self, message: str) -> None:
        self.phase = "crashed"
        self.error = message
        self.live = None
        for row in self.rows:
            self._settle(row)

    def _sweep_started(self, event: SweepStarted) -> set[str]:
        self.sweeps_started += 1
        self.machine = event.machine
        self.settings = event.settings
        self.run_dir = event.run_dir
        self.phase = "running"
        self.t = 0.0
        self.finish_times = []
        self.by_index = {}
        self.total = len(event.planned)
        self.current = None
        self.live = None
        self.busy_recent = []
        self.gpu_recent = {}
        self.gpu_unavailable = event.machine.gpu_unavailable if not event.machine.gpus else None
        if event.previous is not None:
            self.previous = event.previous
        if self.only:
            for config in dict.fromkeys(event.planned):
                row = self.row_for(config)
                row._before_rerun = (row.status, row.baseline)
                if row.result is not None and row.result.status == "ok":
                    row.baseline = row.result
                row.status = "queued"
                row.runs = []
        else:
            old = {t.config: t for t in self.previous.trials if t.status == "ok"} if self.previous else {}
            self.rows = [Row(config, baseline=old.get(config)) for config in dict.fromkeys(event.planned)]
            self.traces = {}
            self.selected = None
        return set(PANES)

    def _trial_started(self, event: TrialStarted) -> set[str]:
        self.by_index[event.index] = event.config
        self.total = max(self.total, event.total)
        self.current = event.index
        trace = TrialTrace(
            index=event.index,
            config=event.config,
            first_batch_s=event.first_batch_s,
            start_t=self.t,
            worker_pids=list(event.worker_pids),
        )
        self.traces[event.config] = trace
        self.live = self.last = trace
        self.row_for(event.config).status = "running"
        return set(PANES) - {"chart"}

    def _progress(self, event: TrialProgress) -> set[str]:
        trace = self._trace(event.index)
        if trace is None:
            return set()
        trace.samples_per_s = _push(trace.samples_per_s, event.samples_per_s)
        trace.batches_per_s = _push(trace.batches_per_s, event.batches_per_s)
        busy = 1.0 - event.stall_fraction
        trace.busy = _push(trace.busy, busy)
        self.busy_recent = _push(self.busy_recent, busy)
        trace.spread = event.spread
        trace.stall_fraction = event.stall_fraction
        trace.elapsed_s = event.elapsed_s
        return {"live", "gpu", "header"}

    def _probe(self, sample: ProbeSample) -> set[str]:
        self.t = max(self.t, sample.t)
        dirty = {"header", "gpu"}
        for gpu in sample.gpus:
            self.gpu_recent[gpu.index] = _push(self.gpu_recent.get(gpu.index, []), gpu.util_percent)
        if not sample.gpus and sample.gpu_unavailable:
            self.gpu_unavailable = sample.gpu_unavailable
        trace = self._trace(sample.index) if sample.index is not None else None
        if trace is None:
            return dirty
        for worker in sample.workers:
            if worker.uss_mb is None:
                continue
            if worker.pid not in trace.worker_pids:
                trace.worker_pids.append(worker.pid)
            trace.uss[worker.pid] = _push(trace.uss.get(worker.pid, []), (sample.t, worker.uss_mb))
        trace.pss_mb = sample.total_pss_mb if sample.total_pss_mb is not None else trace.pss_mb
        trace.rss_mb = sample.rss_mb if sample.rss_mb is not None else trace.rss_mb
        trace.cpu_percent = sample.cpu_percent
        for gpu in sample.gpus:
            trace.gpu_util[gpu.index] = _push(trace.gpu_util.get(gpu.index, []), gpu.util_percent)
            trace.gpu_mem_mb[gpu.index] = gpu.mem_used_mb
        return dirty | {"memory"}

    def _trial_finished(self, result: TrialResult) -> set[str]:
        config = self.by_index.get(result.index, result.config)
        row = self.row_for(config)
        row.runs.append(result)
        row.result = result
        row.status = result.status
        row._before_rerun = None
        trace = self.traces.get(config)
        if trace is not None:
            trace.result = result
        if self.live is not None and self.live.config == config:
            self.live = None
        self.finish_times.append(self.t)
        return set(PANES)

    def _sweep_finished(self, result: SweepResult) -> set[str]:
        for trial in result.trials:
            row = self.row_for(trial.config)
            if row.result is None or row.status in ("queued", "running", "pending"):
                row.result, row.status = trial, trial.status
        for row in self.rows:
            self._settle(row, complete=not result.interrupted)
        if self.only and self.result is not None:
            self.result = self._merged(self.result, result)
        else:
            self.result = result
        self.phase = "finished"
        self.live = None
        self.current = None
        self.paused = self.stopping = False
        rec = self.result.recommendation
        if rec is not None:
            self.selected = rec.config
        return set(PANES)

    def _merged(self, old: SweepResult, rerun: SweepResult) -> SweepResult:
        """A row rerun's result holds only the rerun rows: fold them into the table and judge it whole again."""
        results = [row.result for row in self.rows if row.result is not None]
        trials = tuple(replace(t, index=i) for i, t in enumerate(results))
        try:
            knee, rec = analyze(trials, old.settings, rerun.machine)
        except Exception:  # a judgement that fails must not take the table down: keep the last one
            knee, rec = old.knee, old.recommendation
        return SweepResult(
            machine=rerun.machine,
            settings=old.settings,
            trials=trials,
            knee=knee,
            recommendation=rec,
            run_dir=rerun.run_dir,
            interrupted=rerun.interrupted,
            wall_s=rerun.wall_s,
        )

    def _settle(self, row: Row, complete: bool = False) -> None:
        """A row the sweep never got to (or cut short) goes back to what it showed, or says so. In a sweep that
        ran to its end, a planned row left pending is a rung the adaptive search found it did not need."""
        if row.status == "queued" and row._before_rerun is not None:
            row.status, row.baseline = row._before_rerun
        elif row.status == "pending":
            row.status = "not needed" if complete else "not run"
        elif row.status == "running":
            row.status = "interrupted"
        row._before_rerun = None

    def _trace(self, index: int) -> TrialTrace | None:
        config = self.by_index.get(index)
        return self.traces.get(config) if config is not None else None


def _push(series: list, value: object) -> list:
    """Append, keeping at most HISTORY items (the panes render text from these, so in place is fine)."""
    series.append(value)
    if len(series) > HISTORY:
        del series[: len(series) - HISTORY]
    return series

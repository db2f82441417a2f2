"""The app's model of the sweep: engine events in, plain data out.

No Textual here: the panes read this model, and tests drive it with events directly. `apply()` returns
the names of the panes an event made stale, so the app redraws only those, and only on its timer.
The engine owns every judgement: at the end of a sweep (a row rerun included) its result is the whole picture.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from loadertop.core.engine import Report, TrialCount, build_report
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.curves import family_key
from loadertop.core.model.events import (
    Event,
    Notice,
    ProbeSample,
    SweepFinished,
    SweepStarted,
    TrialFinished,
    TrialLaunched,
    TrialProgress,
    TrialStarted,
)
from loadertop.core.model.results import Knee, MachineInfo, Recommendation, SweepResult, TrialResult
from loadertop.faces.tui.trace import TrialTrace, push

PANES = ("header", "gpu", "memory", "live", "chart", "table")
TRIAL_PANES = frozenset({"header", "gpu", "memory", "live"})  # what a running trial's samples change


@dataclass
class Row:
    """One configuration in the results table."""

    config: TrialConfig
    # pending | queued | running | ok | failed | skipped | interrupted | not run | not needed
    status: str = "pending"
    result: TrialResult | None = None
    baseline: TrialResult | None = None  # the same configuration in the run this one is compared with
    runs: list[TrialResult] = field(default_factory=list)  # this configuration's measurements (finalists repeat)

    @property
    def compared(self) -> bool:
        """A rerun row with what it showed before: its change is against that."""
        return self.baseline is not None and self.baseline is not self.result

    def measured(self) -> list[TrialResult]:
        return self.runs or ([self.result] if self.result is not None else [])


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
        # By (sweep, trial index): a row rerun numbers its trials from 0 again; earlier sweeps' stay viewable.
        self.traces: dict[tuple[int, int], TrialTrace] = {}
        self.live: TrialTrace | None = None
        self.last: TrialTrace | None = None
        self.selected: TrialConfig | None = None
        self.count = TrialCount()  # the engine's count: the total so far and what the search added to the plan
        self.measured: list[TrialResult] = []  # what this sweep measured (a row rerun's own trials)
        self.current: int | None = None
        self.gpu_recent: dict[int, list[float]] = {}
        self.gpu_unavailable: str | None = None
        self.busy_recent: list[float] = []
        self.result: SweepResult | None = previous  # the latest whole picture, from the engine
        self.previous: SweepResult | None = previous  # what the running sweep is compared with
        self.notices: list[Notice] = []
        self.sweeps_started = 0
        if previous:
            self._take(previous)

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

    @property
    def t(self) -> float:
        """The sweep's clock (its latest probe tick), as the engine's count keeps it."""
        return self.count.t

    @property
    def total(self) -> int:
        return self.count.total

    def eta(self) -> float | None:
        """Seconds left in this sweep: the engine's count says (TrialCount.eta)."""
        return self.count.eta() if self.running else None

    def focus(self) -> TrialTrace | None:
        """The trial the memory and live panes show: the running one, else the highlighted row's latest."""
        if self.live is not None:
            return self.live
        if self.selected is not None:
            shown = [key for key, t in self.traces.items() if t.config == self.selected]
            if shown:
                return self.traces[max(shown)]
        return self.last

    def current_config(self) -> TrialConfig | None:
        trace = self.trace(self.current)
        return trace.config if trace is not None else None

    def row_for(self, config: TrialConfig) -> Row:
        for row in self.rows:
            if row.config == config:
                return row
        # An adaptive search adds configurations as it goes: slot them into their climb, not at the end.
        row = Row(config)
        self.rows.append(row)
        families = list(dict.fromkeys(family_key(r.config) for r in self.rows))
        self.rows.sort(key=lambda r: (families.index(family_key(r.config)), r.config.num_workers))
        return row

    def report(self) -> Report | None:
        """The engine's report of what the table shows: the finished result, or mid-sweep every run so far (a
        finalist's repeats included, their mean the engine's), compared with the previous run; after a row rerun,
        each rerun row with what it showed before. Every figure a pane prints of a configuration is this report's."""
        shown = self.snapshot()
        if shown is None:
            return None
        if self.running:
            shown = replace(shown, trials=tuple(t for row in self.rows for t in row.measured()))
        previous = self.previous
        if self.only:
            baselines = tuple(row.baseline for row in self.rows if row.compared and row.baseline is not None)
            previous = replace(shown, trials=baselines) if baselines else None
        return build_report(shown, previous)

    def snapshot(self) -> SweepResult | None:
        """The result to export now: the finished one, or the trials finished so far mid-sweep."""
        if not self.running and self.result is not None:
            return self.result
        if self.machine is None or self.settings is None:
            return self.result
        trials = tuple(t for row in self.rows for t in row.measured())
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

    # ---- writing: the app's requests -------------------------------------------------------------

    def begin(self, only: bool) -> None:
        """Called by the app just before it starts a sweep, so SweepStarted knows what kind it is."""
        self.only = only and bool(self.rows)
        self.phase = "running"
        self.paused = False
        self.stopping = False
        self.error = None

    def set_paused(self, paused: bool) -> None:
        self.paused = paused

    def stop_requested(self) -> None:
        self.stopping = True

    def select(self, config: TrialConfig) -> bool:
        """The user highlighted a row; True when the panes must show it (no trial is running)."""
        if config == self.selected:
            return False
        self.selected = config
        return self.live is None

    def crashed(self, message: str) -> None:
        self.phase = "crashed"
        self.error = message
        self.live = None
        for row in self.rows:
            _settle(row, complete=False)

    # ---- writing: the engine's events ------------------------------------------------------------

    def apply(self, event: Event) -> set[str]:
        counted = {"header"} if self.count.apply(event) else set()
        return counted | self._apply(event)

    def _apply(self, event: Event) -> set[str]:
        if isinstance(event, ProbeSample):
            return self._probe(event)
        if isinstance(event, TrialProgress):
            return self._progress(event)
        if isinstance(event, (TrialLaunched, TrialStarted)):
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

    def _sweep_started(self, event: SweepStarted) -> set[str]:
        self.sweeps_started += 1
        self.machine = event.machine
        self.settings = event.settings
        self.run_dir = event.run_dir
        self.phase = "running"
        self.measured = []
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

    def _trial_started(self, event: TrialLaunched | TrialStarted) -> set[str]:
        """TrialLaunched (the fork) makes the trial the running one; TrialStarted adds its workers. A repeated
        configuration is a new trial with a new index: the panes follow it, not the finished first run."""
        self.current = event.index
        trace = self.trace(event.index)
        if isinstance(event, TrialStarted) and trace is not None:  # launched before: the table already says so
            trace.first_batch_s = event.first_batch_s
            trace.worker_pids = list(dict.fromkeys([*event.worker_pids, *trace.worker_pids]))
            return set(TRIAL_PANES)
        trace = TrialTrace(index=event.index, config=event.config)
        if isinstance(event, TrialStarted):  # an event stream without TrialLaunched
            trace.first_batch_s = event.first_batch_s
            trace.worker_pids = list(event.worker_pids)
        self.traces[(self.sweeps_started, event.index)] = trace
        self.live = self.last = trace
        self.row_for(event.config).status = "running"
        return set(PANES) - {"chart"}

    def _progress(self, event: TrialProgress) -> set[str]:
        trace = self.trace(event.index)
        if trace is None or trace.result is not None:
            return set()
        trace.progress(event)
        push(self.busy_recent, 1.0 - event.stall_fraction)
        return {"live", "gpu", "header"}

    def _probe(self, sample: ProbeSample) -> set[str]:
        for gpu in sample.gpus:
            push(self.gpu_recent.setdefault(gpu.index, []), gpu.util_percent)
        if not sample.gpus and sample.gpu_unavailable:
            self.gpu_unavailable = sample.gpu_unavailable
        trace = self.trace(sample.index)
        if trace is None or not trace.probe(sample):
            return {"header", "gpu"}
        return {"header", "gpu", "memory"}

    def _trial_finished(self, result: TrialResult) -> set[str]:
        trace = self.trace(result.index)
        config = trace.config if trace is not None else result.config
        row = self.row_for(config)
        row.runs.append(result)
        self.measured.append(result)
        row.result = result
        row.status = result.status
        if trace is not None:
            trace.result = result
        if self.live is trace:
            self.live = None
        return set(PANES)

    def _sweep_finished(self, result: SweepResult) -> set[str]:
        """The engine's result is the whole picture: a row rerun's result has every row, judged together."""
        self.result = result
        self._take(result)
        for row in self.rows:
            _settle(row, complete=not result.interrupted)
        self.phase = "finished"
        self.live = None
        self.current = None
        self.paused = self.stopping = False
        if result.recommendation is not None:
            self.selected = result.recommendation.config
        return set(PANES)

    def _take(self, result: SweepResult) -> None:
        """Rows from a result: one per configuration, its runs the result's trials of that configuration."""
        runs: dict[TrialConfig, list[TrialResult]] = {}
        for trial in result.trials:
            runs.setdefault(trial.config, []).append(trial)
        for config, trials in runs.items():
            row = self.row_for(config)
            row.runs, row.result, row.status = trials, trials[-1], trials[-1].status

    def trace(self, index: int | None) -> TrialTrace | None:
        """The running (or last) sweep's trial `index`, as sampled."""
        return self.traces.get((self.sweeps_started, index)) if index is not None else None


def _settle(row: Row, complete: bool) -> None:
    """A row the sweep never got to (or cut short) says so. In a sweep that ran to its end, a planned row left
    pending is a rung the adaptive search found it did not need; a queued rerun keeps what the row showed."""
    if row.status == "queued" and row.result is not None:
        row.status = row.result.status
    elif row.status in ("pending", "queued"):
        row.status = "not needed" if complete else "not run"
    elif row.status == "running":
        row.status = "interrupted"

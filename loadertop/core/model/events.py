"""The event stream: the only contract between the engine and its faces (TUI, headless, API).

Events are frozen dataclasses, produced by the driver and probe threads and consumed in order from
`Sweep.events()`. Tests feed the faces recorded or fake streams of these same objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import MachineInfo, SweepResult, TrialResult


@dataclass(frozen=True)
class SweepStarted:
    run_dir: str
    machine: MachineInfo
    settings: Settings
    planned: tuple[TrialConfig, ...]
    previous: SweepResult | None = None  # the run this one is compared with (a rerun)


@dataclass(frozen=True)
class TrialLaunched:
    """The trial's process exists (its workers are not started yet): faces follow it from here."""

    index: int  # 0-based position in this sweep
    total: int  # trials planned so far (adaptive searches may add more)
    config: TrialConfig
    pid: int


@dataclass(frozen=True)
class TrialStarted:
    index: int  # 0-based position in this sweep
    total: int  # trials planned so far (adaptive searches may add more)
    config: TrialConfig
    pid: int  # the trial's main process (the training loop's stand-in)
    worker_pids: tuple[int, ...]
    first_batch_s: float  # time from iter(loader) to the first batch: start-up, reported apart


@dataclass(frozen=True)
class TrialProgress:
    """One measured block of batches (after the start-up buffer was skipped)."""

    index: int
    block: int
    batches_per_s: float
    samples_per_s: float
    stall_fraction: float  # over the measured blocks so far
    elapsed_s: float  # since the trial started
    spread: float | None  # IQR/median of the recent blocks, None until enough blocks
    # The median block's samples/s so far: the trial's figure as it stands, the engine's (its result may count fewer).
    median_samples_per_s: float | None = None


@dataclass(frozen=True)
class WorkerSample:
    pid: int
    rss_mb: float
    cpu_percent: float
    uss_mb: float | None  # refreshed at most every 2 s (memory_full_info is costly); last known value
    pss_mb: float | None = None  # read with USS, same pacing


@dataclass(frozen=True)
class GpuSample:
    index: int
    util_percent: float
    mem_used_mb: float


@dataclass(frozen=True)
class WorkerUss:
    """One worker of the running trial, judged by the engine (engine/verdict/memory.py) over the trial's steady
    window."""

    pid: int
    uss_mb: float | None  # the last known reading
    slope_mb_per_min: float | None  # least squares over the window's distinct readings; None until enough of them
    climbing: bool = False  # steady, significant growth: the ⚠ of every face


@dataclass(frozen=True)
class UssFigures:
    """The running trial's own workers (never a parked pool's, nor an earlier epoch's), as every face shows them."""

    workers: tuple[WorkerUss, ...]
    leak: str | None = None  # the warning sentence when a worker climbs, else None


@dataclass(frozen=True)
class ProbeSample:
    """One tick of the probes thread. `index` is the running trial, None between trials."""

    index: int | None
    t: float  # seconds since the sweep started
    workers: tuple[WorkerSample, ...]
    main_rss_mb: float | None
    main_cpu_percent: float | None
    total_pss_mb: float | None  # main + workers, last known
    rss_mb: float | None  # main + workers, includes shared pages
    cpu_percent: float  # main + workers, percent of one CPU
    mem_available_mb: float
    cgroup_mem_headroom_mb: float | None
    shm_free_mb: float | None
    gpus: tuple[GpuSample, ...] = ()
    gpu_unavailable: str | None = None
    # Processes outside the trial's group under its parent, the runner (parked finalists' trials and workers), at
    # the last memory read: PSS splits the pages they share with the trial over them too. None: not read.
    beside: int | None = None
    uss: UssFigures | None = None  # the engine's figures for the running trial (driver); None from the probes
    # Every process's CPU on the CPUs this process may run on, percent of one CPU: with `cpu_percent`, whether other
    # processes held the CPUs the trial's loading could use. None: not read.
    machine_cpu_percent: float | None = None


@dataclass(frozen=True)
class TrialFinished:
    result: TrialResult


@dataclass(frozen=True)
class Notice:
    """Something the user should read: a warning about the run, not about one number."""

    level: str  # "info" | "warning" | "error"
    message: str
    index: int | None = None  # a search decision: the trial it chose
    search: str | None = None  # a search decision: its phase (SearchStep.phase: climb, refine, repeat, ...)


@dataclass(frozen=True)
class SweepFinished:
    result: SweepResult  # has knee and recommendation; `interrupted` when stopped early


Event = (
    SweepStarted | TrialLaunched | TrialStarted | TrialProgress | ProbeSample | TrialFinished | Notice | SweepFinished
)

"""What `loadertop attach` shows of a live training job: one `LiveSnapshot` per interval, built once by the engine
(`loadertop.core.engine.attach`) and rendered by every face (the TUI's attach screen, the headless lines, the
JSON lines of `--json`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class LiveWorker:
    """One DataLoader worker of the job, as psutil sees it."""

    pid: int
    uss_mb: float | None  # last known (memory_full_info is read at most every 2 s)
    pss_mb: float | None
    cpu_percent: float | None  # percent of one CPU over the interval
    uss_slope_mb_per_min: float | None  # least squares over the leak window; None until enough readings
    uss_slope_err_mb_per_min: float | None  # its standard error
    leaking: bool = False  # its growth is significant and steady: it is counted in the snapshot's `leak` warning


@dataclass(frozen=True)
class RankRow:
    """One rank of a many-rank job (torchrun's ranks under the launcher's pid) over the last interval."""

    rank: str  # RANK (else LOCAL_RANK) in its environment
    pid: int
    samples_per_s: float | None
    stall_fraction: float | None
    wait_ms_mean: float | None  # the mean wait for a batch: what names the slowest rank
    wait_ms_p95: float | None
    wait_ms_p99: float | None
    workers: int
    slowest: bool  # the rank that waits longest for its data (see JobRanks.slowest_rank)
    ended: str | None = None


@dataclass(frozen=True)
class JobRanks:
    """Every rank of a launcher's job, folded by the engine (engine/live/ranks.py): the faces only show it."""

    launcher_pid: int
    ranks: tuple[RankRow, ...]  # in rank order
    samples_per_s: float | None  # the job's: the ranks' samples/s summed
    slowest_rank: str | None  # the longest mean data wait (then p95); None while fewer than 2 ranks took steps
    pacing: str  # the sentence that names it, e.g. "rank 1 waits longest for data: p95 41.0 ms vs 2.1 ms …"


@dataclass(frozen=True)
class LiveSnapshot:
    """The job over the last interval. Rates are None when the job does not run `loadertop.watch` (then
    `missing` says so) or took no step in the interval."""

    t: float  # seconds since attach
    pid: int
    watched: bool  # the job publishes through loadertop.watch()/tune(); False: psutil and NVML only
    samples_per_s: float | None
    batches_per_s: float | None
    stall_fraction: float | None  # Σ wait in next() ÷ (Σ wait + Σ step) over the interval
    wait_ms_p95: float | None
    step_ms: float | None  # mean training step
    epoch: int | None
    epoch_ends: tuple[float, ...]  # attach-relative times of the epoch boundaries crossed in the interval
    workers: tuple[LiveWorker, ...]
    main_cpu_percent: float | None
    main_rss_mb: float | None
    total_pss_mb: float | None  # job + workers
    gpu_util: float | None  # mean over the job's GPUs; None when unavailable or the job uses none
    gpu_unavailable: str | None  # "unavailable: reason", or why no GPU is shown
    mem_available_mb: float  # what the job can still take: MemAvailable, or the cgroup headroom if tighter
    warnings: tuple[str, ...]  # leak warnings and others, each a whole sentence
    missing: tuple[str, ...]  # what cannot be shown, and why
    notes: tuple[str, ...]  # new since the last snapshot: tune steps, the tune choice, epoch summaries
    ended: str | None = None  # set on the last snapshot: why the view ended ("the job exited")
    leak: str | None = None  # the leak warning (also the first of `warnings`), None while no worker grows
    wait_ms_p50: float | None = None  # the wait's median over the interval's waits (model/figures.py)
    wait_ms_max: float | None = None  # the longest wait in the interval
    wait_ms_p99: float | None = None  # over the interval's waits, as the p95
    wait_ms_mean: float | None = None  # the mean wait for a batch over the interval
    rank: str = "0"  # RANK (else LOCAL_RANK) in the job's environment
    ranks: JobRanks | None = None  # attached to a launcher: every rank (this snapshot is its lowest rank's)
    batches: int = 0  # the steps the interval holds; its rates are over the job's own time for them

    @property
    def worker_uss_mb(self) -> list[float | None]:
        return [w.uss_mb for w in self.workers]

    @property
    def worker_uss_slope_mb_per_min(self) -> list[float | None]:
        return [w.uss_slope_mb_per_min for w in self.workers]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of one interval (`attach --json`): the fields, and per-worker lists beside `workers`."""
        data = asdict(self)
        data["worker_pids"] = [w.pid for w in self.workers]
        data["worker_uss_mb"] = self.worker_uss_mb
        data["worker_uss_slope_mb_per_min"] = self.worker_uss_slope_mb_per_min
        for name in ("epoch_ends", "warnings", "missing", "notes"):
            data[name] = list(data[name])
        return data

"""The probes: one self-pacing thread in the driver process that samples the running trial and the machine.

Each tick reads, for the watched main process and workers, CPU% and RSS (cheap); USS and PSS
(`memory_full_info`, ~5 ms a process) at most every `full_info_every` seconds per process, carrying the last
known values in between; and for the machine MemAvailable, cgroup memory headroom, /dev/shm free and the GPUs.
The next tick is scheduled `interval` after the last one finished, so a slow tick never piles up.

Processes come and go under us (a worker exits, a trial is killed): those are skipped quietly, never raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from loadertop.core.machine.facts import (
    CGROUP_ROOT,
    PROC_SELF_CGROUP,
    SHM_PATH,
    cgroup_memory_headroom_mb,
    mem_available_mb,
    shm_free_mb,
)
from loadertop.core.machine.gpu import GpuProbe, describe_error
from loadertop.core.model.events import GpuSample, ProbeSample, WorkerSample
from loadertop.core.model.figures import MB, mean_of, median_of

log = logging.getLogger(__name__)


class _Tracked:
    """A cached psutil.Process (so cpu_percent has a baseline) and its last USS/PSS reading."""

    __slots__ = ("full_t", "process", "pss_mb", "uss_mb")

    def __init__(self, process: psutil.Process) -> None:
        self.process = process
        self.uss_mb: float | None = None
        self.pss_mb: float | None = None
        self.full_t: float | None = None  # clock time of the last memory_full_info attempt


@dataclass(frozen=True)
class _Reading:
    rss_mb: float
    cpu_percent: float
    uss_mb: float | None
    pss_mb: float | None
    full: bool = False  # USS and PSS were read at this tick (not carried from an earlier one)


def _new_tracked(pid: int) -> _Tracked | None:
    """A tracked process with its CPU baseline taken, or None when the pid is gone or not ours to read."""
    try:
        process = psutil.Process(pid)
        process.cpu_percent(None)  # baseline: the first call always returns 0.0
    except psutil.Error:
        return None
    return _Tracked(process)


class Probes:
    """Samples the watched trial's processes and the machine, and hands each `ProbeSample` to `emit`.

    `emit` runs on the probe thread; an exception from it is logged and the thread carries on.
    `t` in each sample is seconds since this object was created, by `clock`.
    """

    def __init__(
        self,
        emit: Callable[[ProbeSample], None],
        gpu: GpuProbe,
        interval: float = 0.5,
        full_info_every: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        cgroup_root: Path = CGROUP_ROOT,
        shm_path: Path | str = SHM_PATH,
        proc_cgroup: Path = PROC_SELF_CGROUP,
    ) -> None:
        self._emit = emit
        self._gpu = gpu
        self.interval = interval
        self.full_info_every = full_info_every
        self._clock = clock
        self._cgroup_root = cgroup_root
        self._shm_path = shm_path
        self._proc_cgroup = proc_cgroup
        self._t0 = clock()
        self._lock = threading.Lock()  # guards the watched state and the process cache (short holds only)
        self._sample_lock = threading.Lock()  # one sample at a time (thread and direct calls)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._index: int | None = None
        self._main_pid: int | None = None
        self._worker_pids: tuple[int, ...] = ()
        self._procs: dict[int, _Tracked] = {}
        self._gone: set[int] = set()  # watched pids seen exiting: never looked up again (the pid may be reused)
        self._beside: int | None = None  # processes beside the trial at its main process's last memory read
        self._logged: set[str] = set()
        self._cpu_ids = _affinity()
        psutil.cpu_percent(percpu=True)  # baseline: the first call has nothing to compare with
        self.errors = 0  # sample or emit failures so far (each logged, the first of a kind with its traceback)

    # -- control -------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the probe thread (the first sample is taken at once). Does nothing if already running."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="loadertop-probes", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> bool:
        """Stop the thread and wait up to `timeout` s for it; True when it has ended."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def watch(self, index: int | None, main_pid: int | None, worker_pids: Sequence[int]) -> None:
        """Say what to sample: trial `index`, its main process and workers. `watch(None, None, ())` between trials.

        Thread-safe. New processes get their CPU baseline here, so the next tick already has a real CPU%.
        """
        workers = tuple(dict.fromkeys(int(p) for p in worker_pids))  # unique, in order
        wanted = ([] if main_pid is None else [int(main_pid)]) + list(workers)
        with self._lock:
            missing = [pid for pid in wanted if pid not in self._procs and pid not in self._gone]
        fresh = {pid: tracked for pid in missing if (tracked := _new_tracked(pid)) is not None}
        with self._lock:
            if self._main_pid != main_pid:
                self._beside = None
            self._index = index
            self._main_pid = None if main_pid is None else int(main_pid)
            self._worker_pids = workers
            for pid, tracked in fresh.items():
                self._procs.setdefault(pid, tracked)
            for pid in [p for p in self._procs if p not in wanted]:
                del self._procs[pid]
            self._gone &= set(wanted)

    def refresh_memory(self) -> None:
        """Read USS/PSS at the next tick, whatever the full-info pacing says (a steady window just opened)."""
        with self._lock:
            for tracked in self._procs.values():
                tracked.full_t = None

    def __enter__(self) -> Probes:
        self.start()
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self.stop()

    # -- sampling ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sample = self.sample_once()
            except Exception:
                self._log_error("probe sample failed")
            else:
                try:
                    self._emit(sample)
                except Exception:
                    self._log_error("probe emit failed")
            if self._stop.wait(self.interval):  # self-pacing: `interval` after the last tick finished
                break

    def _log_error(self, what: str) -> None:
        self.errors += 1
        if what in self._logged:
            log.debug(what, exc_info=True)
        else:
            self._logged.add(what)
            log.exception("%s (further failures of this kind are logged at debug level)", what)

    def _tracked(self, pid: int) -> _Tracked | None:
        with self._lock:
            tracked = self._procs.get(pid)
            gone = pid in self._gone
        if tracked is not None or gone:
            return tracked
        tracked = _new_tracked(pid)
        if tracked is None:
            with self._lock:
                self._gone.add(pid)
            return None
        with self._lock:
            return self._procs.setdefault(pid, tracked)

    def _forget(self, pid: int, tracked: _Tracked) -> None:
        with self._lock:
            if self._procs.get(pid) is tracked:
                del self._procs[pid]
                self._gone.add(pid)

    def _read(self, pid: int, now: float) -> _Reading | None:
        """One process's reading; None when it is gone (then forgotten) or could not be read this time."""
        tracked = self._tracked(pid)
        if tracked is None:
            return None
        process = tracked.process
        try:
            with process.oneshot():
                if process.status() == psutil.STATUS_ZOMBIE:  # exited, not yet reaped by its parent
                    raise psutil.ZombieProcess(pid)
                cpu = process.cpu_percent(None)
                rss_mb = process.memory_info().rss / MB
            due = tracked.full_t is None or now - tracked.full_t >= self.full_info_every
            if due:
                tracked.full_t = now
                try:
                    info = process.memory_full_info()
                except psutil.AccessDenied:
                    due = False  # keep CPU and RSS; try again at the next full-info time
                else:
                    tracked.uss_mb = info.uss / MB
                    pss = getattr(info, "pss", None)  # Linux only
                    tracked.pss_mb = None if pss is None else pss / MB
        except psutil.NoSuchProcess:  # includes ZombieProcess
            self._forget(pid, tracked)
            return None
        except psutil.AccessDenied:
            return None
        return _Reading(rss_mb=rss_mb, cpu_percent=cpu, uss_mb=tracked.uss_mb, pss_mb=tracked.pss_mb, full=due)

    def sample_once(self) -> ProbeSample:
        """Take one sample now (what the thread does each tick; tests may call it directly)."""
        with self._sample_lock:
            now = self._clock()
            with self._lock:
                index, main_pid, worker_pids = self._index, self._main_pid, self._worker_pids

            main = None
            if main_pid is not None:
                main = self._read(main_pid, now)
                if main is not None and main.full:
                    self._beside = _beside(main_pid)  # counted when PSS is read: the two go together
            workers: list[WorkerSample] = []
            readings: list[_Reading] = [] if main is None else [main]
            for pid in worker_pids:
                reading = self._read(pid, now)
                if reading is None:
                    continue
                readings.append(reading)
                workers.append(
                    WorkerSample(
                        pid=pid,
                        rss_mb=reading.rss_mb,
                        cpu_percent=reading.cpu_percent,
                        uss_mb=reading.uss_mb,
                        pss_mb=reading.pss_mb,
                    )
                )
            pss = [r.pss_mb for r in readings if r.pss_mb is not None]

            gpus: tuple[GpuSample, ...]
            try:
                gpus = self._gpu.sample()
                gpu_unavailable = self._gpu.unavailable
            except Exception as exc:  # GpuProbe never raises; a stand-in might
                gpus, gpu_unavailable = (), f"unavailable: {describe_error(None, exc)}"

            return ProbeSample(
                index=index,
                t=now - self._t0,
                workers=tuple(workers),
                main_rss_mb=None if main is None else main.rss_mb,
                main_cpu_percent=None if main is None else main.cpu_percent,
                total_pss_mb=sum(pss) if pss else None,
                rss_mb=sum(r.rss_mb for r in readings) if readings else None,
                cpu_percent=sum(r.cpu_percent for r in readings),
                mem_available_mb=mem_available_mb(),
                cgroup_mem_headroom_mb=cgroup_memory_headroom_mb(self._cgroup_root, self._proc_cgroup),
                shm_free_mb=shm_free_mb(self._shm_path),
                gpus=gpus,
                gpu_unavailable=gpu_unavailable,
                beside=None if main is None else self._beside,
                machine_cpu_percent=_machine_cpu(self._cpu_ids),
            )


def _affinity() -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux: every CPU
        return None


def _machine_cpu(cpu_ids: list[int] | None) -> float | None:
    """Every process's CPU since the last call on the CPUs in `cpu_ids` (None: all), percent of one CPU."""
    try:
        per_cpu = psutil.cpu_percent(percpu=True)
    except (OSError, RuntimeError):
        return None
    ids = range(len(per_cpu)) if cpu_ids is None else [i for i in cpu_ids if i < len(per_cpu)]
    return sum(per_cpu[i] for i in ids)


def _beside(main_pid: int) -> int | None:
    """Processes under the trial's parent (the runner) outside the trial's own process group: the parked finalists'
    trials and their workers. They were forked from the same runner, so they share pages with the trial and its
    PSS is split with them. None when it cannot be read."""
    try:
        parent = psutil.Process(main_pid).parent()
        if parent is None:
            return None
        group = os.getpgid(main_pid)
        others = 0
        for process in parent.children(recursive=True):
            with contextlib.suppress(ProcessLookupError):
                others += os.getpgid(process.pid) != group
        return others
    except (psutil.Error, ProcessLookupError):
        return None


# -- one trial's steady window ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowStats:
    """Probe samples of one trial's steady window, aggregated. None/empty where nothing was measured.

    The per-worker tuples hold only workers with at least one known USS, in `worker_pids` order; `worker_pids`
    says which ones they are.
    """

    samples: int
    worker_pids: tuple[int, ...]
    worker_uss_mb: tuple[float, ...]  # median of the known USS readings (slopes: engine/verdict/memory.py)
    total_pss_mb: float | None  # median
    parked_beside: int  # the most processes of other parked trials seen beside it at a memory read
    rss_mb: float | None  # median
    cpu_percent: float | None  # mean of main + workers, percent of one CPU
    main_cpu_percent: float | None  # mean
    machine_cpu_percent: float | None  # mean, every process on the CPUs open to this one
    gpu_util: float | None  # mean over samples and GPUs; None without GPU samples
    gpu_mem_mb: float | None  # max over samples and GPUs
    mem_available_min_mb: float | None  # lowest system MemAvailable seen


def measured_pids(samples: Sequence[ProbeSample], worker_pids: Sequence[int]) -> tuple[int, ...]:
    """The workers a window's per-worker figures are about: those of `worker_pids` (the trial's latest) read in
    it; when none was (short epochs: the workers restarted after the last reading), the last ones read."""
    read = {w.pid for s in samples for w in s.workers if w.uss_mb is not None}
    latest = tuple(pid for pid in dict.fromkeys(worker_pids) if pid in read)
    if latest:
        return latest
    last = max((s for s in samples if any(w.uss_mb is not None for w in s.workers)), key=lambda s: s.t, default=None)
    return () if last is None else tuple(w.pid for w in last.workers if w.uss_mb is not None)


def summarize_window(samples: Sequence[ProbeSample], worker_pids: Sequence[int]) -> WindowStats:
    """Aggregate the probe samples of one trial's steady window (see `WindowStats`)."""
    ordered = sorted(samples, key=lambda s: s.t)
    known = measured_pids(ordered, worker_pids)
    uss: dict[int, list[float]] = {pid: [] for pid in known}
    for sample in ordered:
        for worker in sample.workers:
            if worker.uss_mb is not None and worker.pid in uss:
                uss[worker.pid].append(worker.uss_mb)
    # Workers restarting at an epoch boundary are briefly missing from the ticks; PSS and RSS are the whole pool's.
    most = max((len(s.workers) for s in ordered), default=0)
    whole = [s for s in ordered if len(s.workers) == most]
    gpu_samples = [g for s in ordered for g in s.gpus]
    return WindowStats(
        samples=len(ordered),
        worker_pids=tuple(known),
        worker_uss_mb=tuple(median_of(uss[pid]) or 0.0 for pid in known),
        total_pss_mb=median_of(s.total_pss_mb for s in whole),
        parked_beside=max((s.beside for s in ordered if s.beside is not None), default=0),
        rss_mb=median_of(s.rss_mb for s in whole),
        cpu_percent=mean_of([s.cpu_percent for s in ordered]),
        main_cpu_percent=mean_of(s.main_cpu_percent for s in ordered),
        machine_cpu_percent=mean_of(s.machine_cpu_percent for s in ordered),
        gpu_util=mean_of([g.util_percent for g in gpu_samples]),
        gpu_mem_mb=max((g.mem_used_mb for g in gpu_samples), default=None),
        mem_available_min_mb=min((s.mem_available_mb for s in ordered), default=None),
    )
